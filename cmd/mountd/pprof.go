//go:build pprof

package main

import (
	"net/http"
	_ "net/http/pprof" // profiles for benchmarks, only in a build with -tags pprof
	"os"
	"runtime/debug"
)

// A build with -tags pprof serves net/http/pprof on MOUNTD_PPROF_LISTEN
// (e.g. 127.0.0.1:6060), apart from the API, to profile mountd under a
// load tool, and /debug/freeosmemory, which collects the garbage and
// returns the freed memory to the system, so that a load tool's RSS
// reading counts what is live (fanoutbench --gc-url). Release builds
// leave it out.
func init() {
	addr := os.Getenv("MOUNTD_PPROF_LISTEN")
	if addr == "" {
		return
	}
	http.HandleFunc("/debug/freeosmemory", func(w http.ResponseWriter, _ *http.Request) {
		debug.FreeOSMemory()
		w.WriteHeader(http.StatusNoContent)
	})
	go func() { _ = http.ListenAndServe(addr, nil) }()
}
