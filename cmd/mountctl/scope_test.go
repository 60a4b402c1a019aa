package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// TestTokensNameTheServersProject: every token mountctl asks for, its own
// renewing one and `token`'s, carries the audience of the server's scope
// rules, so a server with another MOUNTD_PROJECT_ID answers it.
func TestTokensNameTheServersProject(t *testing.T) {
	var mu sync.Mutex
	var scopes []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/oauth/v2/token":
			_ = r.ParseForm()
			mu.Lock()
			scopes = append(scopes, r.PostForm.Get("scope"))
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"access_token":"tok","token_type":"Bearer","expires_in":3600}`))
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"mounts":[],"pagination":{"currentPage":1,"pageSize":20,"totalItems":0,"totalPages":0}}`))
		}
	}))
	defer srv.Close()
	const want = "urn:fleet-idp:iam:org:project:id:fleet:aud"
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"renewing token, flags", []string{"--project-id", "fleet", "--idp-name", "fleet-idp", "mounts", "list"}, nil},
		{"renewing token, environment", []string{"mounts", "list"}, map[string]string{"MOUNTCTL_PROJECT_ID": "fleet", "MOUNTCTL_IDP_NAME": "fleet-idp"}},
		{"token command", []string{"--project-id", "fleet", "--idp-name", "fleet-idp", "token"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("MOUNTCTL_CLIENT_ID", "c")
			t.Setenv("MOUNTCTL_CLIENT_SECRET", "s")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			mu.Lock()
			scopes = nil
			mu.Unlock()
			var out, errOut bytes.Buffer
			args := append([]string{"mountctl", "--api", srv.URL}, tc.args...)
			if err := newCommand(&out, &errOut).Run(context.Background(), args); err != nil {
				t.Fatalf("%v: %s", err, errOut.String())
			}
			mu.Lock()
			defer mu.Unlock()
			if len(scopes) == 0 {
				t.Fatal("no token was asked for")
			}
			for _, s := range scopes {
				if !bytes.Contains([]byte(s), []byte(want)) {
					t.Errorf("scope %q lacks %q", s, want)
				}
			}
		})
	}
}
