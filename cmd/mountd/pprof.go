//go:build pprof

package main

import (
	"net/http"
	_ "net/http/pprof" // profiles for benchmarks, only in a build with -tags pprof
	"os"
)

// A build with -tags pprof serves net/http/pprof on MOUNTD_PPROF_LISTEN
// (e.g. 127.0.0.1:6060), apart from the API, to profile mountd under a
// load tool. Release builds leave it out.
func init() {
	if addr := os.Getenv("MOUNTD_PPROF_LISTEN"); addr != "" {
		go func() { _ = http.ListenAndServe(addr, nil) }()
	}
}
