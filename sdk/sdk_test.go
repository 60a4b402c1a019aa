package sdk

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

func TestScopeAllows(t *testing.T) {
	aud := "urn:mountd:iam:org:project:id:mountd:aud"
	cases := []struct {
		name  string
		scope string
		uid   string
		want  error
	}{
		{"owner", "openid sub " + aud, "M1", nil},
		{"owner with a mount item is not narrowed", "openid sub " + aud + " role:owner mount:M2", "M1", nil},
		{"rider on its mount", "openid sub " + aud + " role:restricted mount:M1", "M1", nil},
		{"rider on another mount", "openid sub " + aud + " role:restricted mount:M2", "M1", ErrMountNotAllowed},
		{"maintainer", "openid sub " + aud + " role:restricted", "M9", nil},
		{"no audience", "openid sub role:restricted mount:M1", "M1", ErrTokenRejected},
		{"no openid", "sub " + aud, "M1", ErrTokenRejected},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := scopeAllows(strings.Fields(c.scope), c.uid)
			if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
				t.Fatalf("scopeAllows = %v, want %v", err, c.want)
			}
		})
	}
}

func TestTokenClaims(t *testing.T) {
	payload := base64.RawURLEncoding.EncodeToString([]byte(`{"iss":"http://idp.test/","scope":"openid sub","exp":2000000000}`))
	iss, scope, exp, err := tokenClaims("h." + payload + ".s")
	if err != nil || iss != "http://idp.test" || len(scope) != 2 || exp.Unix() != 2000000000 {
		t.Fatalf("tokenClaims = %q %v %v %v", iss, scope, exp, err)
	}
	for _, bad := range []string{"", "a.b", "a.!!!.c", "a." + base64.RawURLEncoding.EncodeToString([]byte("[1]")) + ".c"} {
		if _, _, _, err := tokenClaims(bad); !errors.Is(err, ErrTokenRejected) {
			t.Errorf("tokenClaims(%q) = %v, want ErrTokenRejected", bad, err)
		}
	}
}
