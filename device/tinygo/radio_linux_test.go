//go:build linux

package tinygo

import (
	"strings"
	"testing"
	"time"
)

// Without BlueZ (CI, containers) New fails at once with a hint, instead
// of hanging; with a radio it works. Either is fine here.
func TestNewWithoutBlueZ(t *testing.T) {
	done := make(chan error, 1)
	go func() {
		_, err := New()
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Skip("a BlueZ adapter is present")
		}
		if !strings.Contains(err.Error(), "bluetoothd") {
			t.Fatalf("error without a hint: %v", err)
		}
		t.Log(err)
	case <-time.After(30 * time.Second):
		t.Fatal("New hangs without BlueZ")
	}
}
