package version

import (
	"runtime/debug"
	"testing"
)

func TestDescribe(t *testing.T) {
	for _, tc := range []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{"release", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "3902b97c1a2e4f5a6b7c"}, {Key: "vcs.time", Value: "2026-11-24T21:35:00Z"}, {Key: "vcs.modified", Value: "false"}}},
			"v1.2.0 (rev 3902b97c1a2e, 2026-11-24T21:35:00Z, go1.26.8)"},
		{"modified checkout", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}}},
			"(devel) (rev abc, modified, go1.26.8)"},
		{"no VCS", debug.BuildInfo{GoVersion: "go1.26.8"}, "(devel) (no VCS revision, go1.26.8)"},
	} {
		if got := describe(&tc.info); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
