package rest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// TestWebhookBodyCarriesTheCommand: a COMMAND_* event's webhook body holds
// the command as its status left it, with its issuer (a webhook is the
// account's); the event as a restricted token reads it leaves the issuer out.
func TestWebhookBodyCarriesTheCommand(t *testing.T) {
	at := time.Date(2026, 11, 22, 1, 41, 0, 0, time.UTC)
	cmd := &core.Command{ID: "0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a", Code: "RELEASE_HELMET", Data: map[string]any{"expiresAt": "2026-11-22T01:45:13.123Z"},
		GeneratedAt: at.Add(-time.Minute), Payload: "p", SignedToken: "s", IssuedBy: "client-1",
		Status: core.CommandRefused, StatusAt: at, Reason: "stale command", Verified: true}
	e := core.Event{Type: core.EventCommandRefused, UID: "M1", Mount: core.Mount{UID: "M1"}, Command: cmd, OccurredAt: at}
	codec := core.NewCursorCodec([32]byte{1})
	raw, err := WebhookBody(codec, core.DefaultOfflineAfter)(e)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Type string `json:"type"`
		Data struct {
			Command map[string]any `json:"command"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatal(err)
	}
	c := body.Data.Command
	if body.Type != "COMMAND_REFUSED" || c["id"] != cmd.ID || c["status"] != "REFUSED" || c["reason"] != "stale command" ||
		c["verified"] != true || c["statusAt"] != "2026-11-22T01:41:00.000Z" || c["issuedBy"] != "client-1" {
		t.Fatalf("webhook body %s", raw)
	}
	if j := eventJSON(codec, e, false); j.Command == nil || j.Command.IssuedBy != "" {
		t.Fatalf("a restricted token's event: %+v", j.Command)
	}
	if j := eventJSON(codec, core.Event{Type: core.EventStatesReported, Mount: core.Mount{UID: "M1"}}, true); j.Command != nil {
		t.Fatalf("a report's event carries a command: %+v", j.Command)
	}
}

// TestAccountLevelEventJSON: JOB_COMPLETED shows uid and mount null and
// carries the job, in the event log and in a webhook body alike.
func TestAccountLevelEventJSON(t *testing.T) {
	at := time.Date(2026, 11, 22, 1, 41, 0, 0, time.UTC)
	j := core.Job{ID: "job_1", AccountID: "acc-1", Code: "RELEASE_HELMET", State: core.JobCompleted, CreatedAt: at.Add(-time.Hour),
		ExpiresAt: at.Add(time.Hour), EndedAt: at, Targets: 2, Counts: core.JobCounts{Executed: 1, Refused: 1}, Finished: 2}
	e := *core.JobCompletedEvent(j, at)
	codec := core.NewCursorCodec([32]byte{1})
	raw, err := WebhookBody(codec, core.DefaultOfflineAfter)(e)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Type string                     `json:"type"`
		Data map[string]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatal(err)
	}
	if body.Type != "JOB_COMPLETED" || string(body.Data["uid"]) != "null" || string(body.Data["mount"]) != "null" {
		t.Fatalf("webhook body %s", raw)
	}
	var job map[string]any
	if err := json.Unmarshal(body.Data["job"], &job); err != nil || job["id"] != "job_1" || job["state"] != "COMPLETED" ||
		job["counts"].(map[string]any)["refused"] != 1.0 || job["params"] == nil {
		t.Fatalf("the body's job %s", body.Data["job"])
	}
	mountEvent := eventJSON(codec, core.Event{Type: core.EventStatesReported, UID: "M1", Mount: core.Mount{UID: "M1"}}, true)
	if mountEvent.UID == nil || *mountEvent.UID != "M1" || mountEvent.Mount == nil || mountEvent.Job != nil {
		t.Fatalf("a mount's event: %+v", mountEvent)
	}
}
