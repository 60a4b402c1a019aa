package app

import (
	"os"
	"os/user"
	"strconv"
	"strings"
	"testing"

	"github.com/mountd/mountd/core"
)

// TestOperatorIsTheRealUser: the mountd commands' actor is the process's
// own user; SUDO_USER (and USER), which the caller sets, only add a hint
// to its name and never replace it.
func TestOperatorIsTheRealUser(t *testing.T) {
	for _, tc := range []struct {
		name, user, sudo string
		want             core.Actor
	}{
		{"no sudo", "root", "", core.Actor{Type: core.ActorCLI, ID: "root", Name: "root"}},
		{"sudo", "root", "alice", core.Actor{Type: core.ActorCLI, ID: "root", Name: "root (sudo from alice)"}},
		{"sudo to oneself", "alice", "alice", core.Actor{Type: core.ActorCLI, ID: "alice", Name: "alice"}},
		{"a hint with controls", "root", "ali\x1b[2Jce\n", core.Actor{Type: core.ActorCLI, ID: "root", Name: "root (sudo from ali[2Jce)"}},
		{"a long hint", "mountd", strings.Repeat("a", 100),
			core.Actor{Type: core.ActorCLI, ID: "mountd", Name: "mountd (sudo from " + strings.Repeat("a", 64) + ")"}},
	} {
		if got := operatorOf(tc.user, tc.sudo); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}

	real := "uid " + strconv.Itoa(os.Getuid())
	if u, err := user.LookupId(strconv.Itoa(os.Getuid())); err == nil {
		real = u.Username
	}
	t.Setenv("USER", "mallory")
	t.Setenv("SUDO_USER", "mallory")
	a := Operator()
	if a.Type != core.ActorCLI || a.ID != real {
		t.Fatalf("actor %+v, want the process's user %q", a, real)
	}
	if want := real + " (sudo from mallory)"; real != "mallory" && a.Name != want {
		t.Fatalf("name %q, want %q", a.Name, want)
	}
}
