package console_test

import (
	"testing"

	"github.com/mountd/mountd/console"
)

// TestAssetBudget: the console's files weigh at most 400 KB over the wire
// (gzip), so that it opens at once also on a slow link (docs/performance.md).
func TestAssetBudget(t *testing.T) {
	h, err := console.New(console.Config{Issuer: "http://127.0.0.1:8080", ClientID: "mountd-console"})
	if err != nil {
		t.Fatal(err)
	}
	const budget = 400_000
	if n := h.CompressedSize(); n > budget || n == 0 {
		t.Fatalf("the console weighs %d bytes compressed, budget %d", n, budget)
	} else {
		t.Logf("the console weighs %d bytes compressed", n)
	}
}
