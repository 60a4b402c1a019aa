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
