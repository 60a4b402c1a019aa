package core_test

import (
	"reflect"
	"testing"

	"github.com/mountd/mountd/core"
)

var rules = core.ScopeRules{IDPName: "mountd", ProjectID: "mountd"}

const aud = "urn:mountd:iam:org:project:id:mountd:aud"

func TestScopeRulesParse(t *testing.T) {
	tests := []struct {
		name    string
		items   []string
		want    core.Grant
		wantErr bool
	}{
		{
			name:  "owner by default",
			items: []string{"openid", "sub", aud},
			want:  core.Grant{Complete: true, Role: core.RoleOwner, MountUIDs: []string{}, Scopes: []string{"openid", "sub", aud}},
		},
		{
			name:  "restricted to mounts, profile ignored",
			items: []string{"openid", "profile", "sub", aud, "role:restricted", "mount:M2", "mount:M1", "mount:M1"},
			want: core.Grant{Complete: true, Role: core.RoleRestricted, MountUIDs: []string{"M1", "M2"},
				Scopes: []string{"openid", "profile", "sub", aud, "role:restricted", "mount:M2", "mount:M1"}},
		},
		{
			name:  "missing audience: issued but incomplete",
			items: []string{"openid", "sub"},
			want:  core.Grant{Complete: false, Role: core.RoleOwner, MountUIDs: []string{}, Scopes: []string{"openid", "sub"}},
		},
		{
			name:  "missing openid: incomplete",
			items: []string{"sub", aud, "role:owner"},
			want:  core.Grant{Complete: false, Role: core.RoleOwner, MountUIDs: []string{}, Scopes: []string{"sub", aud, "role:owner"}},
		},
		{name: "unknown item", items: []string{"openid", "email"}, wantErr: true},
		{name: "unknown role", items: []string{"role:admin"}, wantErr: true},
		{name: "two roles", items: []string{"role:owner", "role:restricted"}, wantErr: true},
		{name: "empty mount uid", items: []string{"mount:"}, wantErr: true},
		{name: "malformed mount uid", items: []string{"mount:a/b"}, wantErr: true},
		{name: "audience of another project", items: []string{"urn:mountd:iam:org:project:id:other:aud"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := rules.Parse(tt.items)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Parse(%v) = %+v, want an error", tt.items, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%v): %v", tt.items, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Parse(%v)\n got %+v\nwant %+v", tt.items, got, tt.want)
			}
		})
	}
}

func principal(t *testing.T, items ...string) core.Principal {
	t.Helper()
	g, err := rules.Parse(items)
	if err != nil {
		t.Fatal(err)
	}
	return core.Principal{AccountID: "acc", Grant: g}
}

// TestAuthorizationMatrix checks docs/api.md, "Identity": every action for every kind of
// token.
func TestAuthorizationMatrix(t *testing.T) {
	owner := principal(t, "openid", "sub", aud)
	ownerWithMount := principal(t, "openid", "sub", aud, "role:owner", "mount:M1")
	restricted := principal(t, "openid", "sub", aud, "role:restricted", "mount:M1")
	maintainer := principal(t, "openid", "sub", aud, "role:restricted")
	incomplete := principal(t, "openid", "sub", "role:owner")

	readOnly := map[core.Action]bool{
		core.ActionReadAccount: true, core.ActionListMounts: true, core.ActionReadMount: true,
		core.ActionReportStates: true, core.ActionReadStates: true, core.ActionQueryCommand: true,
		core.ActionReadNfcTags: true, core.ActionReadFirmware: true, core.ActionSubscribe: true,
	}
	all := []core.Action{
		core.ActionReadAccount, core.ActionListMounts, core.ActionReadMount, core.ActionRequestAssociation,
		core.ActionConfirmAssociation, core.ActionUpdateMount, core.ActionDeleteMount, core.ActionAbandonMount,
		core.ActionReportStates, core.ActionReadStates, core.ActionQueryCommand, core.ActionReadCommandAudit,
		core.ActionReadNfcTags, core.ActionWriteNfcTags, core.ActionReadFirmware, core.ActionSubscribe,
	}
	for _, a := range all {
		t.Run(string(a), func(t *testing.T) {
			cases := []struct {
				name  string
				p     core.Principal
				mount string
				want  core.Code // "" = allowed
			}{
				{"owner", owner, "M9", ""},
				{"owner with mount item is not narrowed", ownerWithMount, "M9", ""},
				{"incomplete token", incomplete, "M1", core.CodeInsufficientScope},
				{"restricted on its mount", restricted, "M1", map[bool]core.Code{true: "", false: core.CodeForbidden}[readOnly[a]]},
				{"restricted on another mount", restricted, "M2", core.CodeMountNotFound},
				{"maintainer on any mount", maintainer, "M7", map[bool]core.Code{true: "", false: core.CodeForbidden}[readOnly[a]]},
			}
			for _, c := range cases {
				err := c.p.AuthorizeMount(a, c.mount)
				got := core.Code("")
				if err != nil {
					got = core.ErrorCode(err)
				}
				if got != c.want {
					t.Errorf("%s: AuthorizeMount(%s, %s) = %q, want %q", c.name, a, c.mount, got, c.want)
				}
			}
		})
	}
}

func TestSecretHashing(t *testing.T) {
	h, err := core.HashSecret("s3cret")
	if err != nil {
		t.Fatal(err)
	}
	h2, _ := core.HashSecret("s3cret")
	if h == h2 {
		t.Fatal("two hashes of one secret are equal: the salt is not random")
	}
	for _, tt := range []struct {
		hash, secret string
		want         bool
	}{
		{h, "s3cret", true},
		{h, "s3cret ", false},
		{h, "", false},
		{"plain", "plain", false},
		{"$argon2id$v=19$m=x$a$b", "x", false},
	} {
		if got := core.VerifySecret(tt.hash, tt.secret); got != tt.want {
			t.Errorf("VerifySecret(%q, %q) = %v, want %v", tt.hash, tt.secret, got, tt.want)
		}
	}
}
