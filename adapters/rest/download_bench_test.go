package rest_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/blob/local"
	"github.com/mountd/mountd/adapters/rest"
)

// BenchmarkSignedDownload serves a 4 MiB firmware file through a signed
// local link. B/op far below 4 MiB shows the file is streamed, not held in
// memory; peak-rss-MiB is the process's high-water mark after the run.
func BenchmarkSignedDownload(b *testing.B) {
	const size = 4 << 20
	store, err := local.New(b.TempDir(), "", [32]byte{1})
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, size)
	_, _ = rand.Read(data)
	if _, _, err := store.Put(context.Background(), "firmware/HM-1/1.0.0-x.bin", bytes.NewReader(data)); err != nil {
		b.Fatal(err)
	}
	srv := rest.NewServer(rest.Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Blobs: store})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	link, err := store.Link(context.Background(), "firmware/HM-1/1.0.0-x.bin", time.Now().Add(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		res, err := http.Get(ts.URL + link)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || n != size {
			b.Fatalf("status %d, %d bytes", res.StatusCode, n)
		}
	}
	b.StopTimer()
	b.ReportMetric(peakRSSMiB(), "peak-rss-MiB")
}

func peakRSSMiB() float64 {
	raw, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			kb, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
			return kb / 1024
		}
	}
	return 0
}
