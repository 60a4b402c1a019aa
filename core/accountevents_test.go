package core_test

import (
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// TestAccountLevelEventsReachAccountReaders: JOB_COMPLETED (no mount) is
// a known type, selected by a query of every mount, left out by one that
// names mounts, and delivered to webhooks without mountUids only.
func TestAccountLevelEventsReachAccountReaders(t *testing.T) {
	at := time.Date(2026, 11, 22, 1, 41, 0, 0, time.UTC)
	e := *core.JobCompletedEvent(core.Job{ID: "job_1", AccountID: "acc-1", State: core.JobCompleted}, at)
	if !e.AccountLevel() || !core.KnownEventType(core.EventJobCompleted) {
		t.Fatal("JOB_COMPLETED is not an account-level event of the API")
	}
	for _, c := range []struct {
		name string
		q    core.EventQuery
		want bool
	}{
		{"every mount", core.EventQuery{AccountID: "acc-1"}, true},
		{"its type", core.EventQuery{AccountID: "acc-1", Types: []core.EventType{core.EventJobCompleted}}, true},
		{"a mount named", core.EventQuery{AccountID: "acc-1", MountUIDs: []string{"M1"}}, false},
		{"no mount", core.EventQuery{AccountID: "acc-1", MountUIDs: []string{}}, false},
		{"another account", core.EventQuery{AccountID: "acc-2"}, false},
	} {
		if got := c.q.Selects(e); got != c.want {
			t.Errorf("%s: Selects = %v, want %v", c.name, got, c.want)
		}
	}
	hook := core.Webhook{AccountID: "acc-1", Enabled: true, CreatedAt: at.Add(-time.Hour)}
	if !hook.Wants(e) {
		t.Error("a webhook without mountUids does not want JOB_COMPLETED")
	}
	hook.MountUIDs = []string{"M1"}
	if hook.Wants(e) {
		t.Error("a webhook with mountUids wants JOB_COMPLETED")
	}
}
