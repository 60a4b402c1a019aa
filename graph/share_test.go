package graph

import (
	"context"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/executor"

	"github.com/mountd/mountd/core"
)

// allowEvents lets every subscriber subscribe (the key's rights check).
type allowEvents struct{ EventLog }

func (allowEvents) Authorize(context.Context, core.Principal, core.EventFilter) error { return nil }

// TestShareKey: subscriptions share one execution, and so the same bytes,
// exactly when their results are the same: texts that differ only in
// comments or layout share; another selection, another operation name,
// other variables, another account or another grant never do.
func TestShareKey(t *testing.T) {
	r := &Resolver{EventLog: allowEvents{}}
	exec := executor.New(newExecutableSchema(r))
	owner := core.Principal{AccountID: "A", Grant: core.Grant{Complete: true, Role: core.RoleOwner}}
	const state = `subscription S($uid: ID!) { mountStateChanged(uid: $uid) { uid occurredAt states { code value } } }`
	key := func(t *testing.T, p core.Principal, query string, vars map[string]any) string {
		t.Helper()
		ctx := graphql.StartOperationTrace(core.WithPrincipal(context.Background(), p))
		rc, errs := exec.CreateOperationContext(ctx, &graphql.RawParams{Query: query, Variables: vars})
		if errs != nil {
			t.Fatalf("%s: %v", query, errs)
		}
		k, err := r.shareKey(ctx, rc)
		if err != nil || k == "" {
			t.Fatalf("%s: key %q, %v", query, k, err)
		}
		return k
	}
	m1 := map[string]any{"uid": "M1"}
	base := key(t, owner, state, m1)
	for _, tc := range []struct {
		name  string
		p     core.Principal
		query string
		vars  map[string]any
		share bool
	}{
		{"a comment of its own", owner, "# dashboard 17\n" + state, m1, true},
		{"another layout", owner, "subscription S($uid: ID!) {\n  mountStateChanged(uid: $uid) {\n    uid\n    occurredAt\n    states { code value }\n  }\n}", m1, true},
		{"another owner token of the account", core.Principal{AccountID: "A", ClientID: "other", TokenID: "t2", Grant: owner.Grant}, state, m1, true},
		{"another operation name", owner, `subscription T($uid: ID!) { mountStateChanged(uid: $uid) { uid occurredAt states { code value } } }`, m1, false},
		{"another field", owner, `subscription S($uid: ID!) { mountStateChanged(uid: $uid) { uid states { code value } } }`, m1, false},
		{"an alias", owner, `subscription S($uid: ID!) { mountStateChanged(uid: $uid) { id: uid occurredAt states { code value } } }`, m1, false},
		{"another mount", owner, state, map[string]any{"uid": "M2"}, false},
		{"another account", core.Principal{AccountID: "B", Grant: owner.Grant}, state, m1, false},
		{"a restricted token", core.Principal{AccountID: "A", Grant: core.Grant{Complete: true, Role: core.RoleRestricted, MountUIDs: []string{"M1"}}}, state, m1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := key(t, tc.p, tc.query, tc.vars) == base; got != tc.share {
				t.Fatalf("shares with the base subscription: %v, want %v", got, tc.share)
			}
		})
	}
}
