// Package version describes the running binary from the build information
// the Go toolchain records: the module version and, for a build from a git
// checkout, the VCS revision, its time and whether the tree was modified.
package version

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// String is what `--version` prints after the program's name, for example
// "v1.2.0 (rev 3902b97c1a2e, 2026-11-24T21:35:00Z)" or
// "(devel) (rev 3902b97c1a2e, 2026-11-24T21:35:00Z, modified)".
func String() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build information)"
	}
	return describe(info)
}

func describe(info *debug.BuildInfo) string {
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	var vcs []string
	if rev := settings["vcs.revision"]; rev != "" {
		vcs = append(vcs, "rev "+rev[:min(12, len(rev))])
	}
	if t := settings["vcs.time"]; t != "" {
		vcs = append(vcs, t)
	}
	if settings["vcs.modified"] == "true" {
		vcs = append(vcs, "modified")
	}
	if len(vcs) == 0 {
		vcs = append(vcs, "no VCS revision")
	}
	return fmt.Sprintf("%s (%s, %s)", v, strings.Join(vcs, ", "), info.GoVersion)
}
