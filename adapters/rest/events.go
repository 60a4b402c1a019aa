package rest

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mountd/mountd/core"
)

// EventJSON is an event of the log (docs/api.md, "Event log"). An
// account-level event (JOB_COMPLETED, ROLLOUT_*) has uid and mount null.
type EventJSON struct {
	ID         string      `json:"id"`
	Type       string      `json:"type"`
	UID        *string     `json:"uid"`
	OccurredAt Time        `json:"occurredAt"`
	Mount      *MountJSON  `json:"mount"`
	States     []stateJSON `json:"states,omitempty"`
	// Command is the command whose status moved (COMMAND_EXECUTED,
	// COMMAND_REFUSED, COMMAND_UNCONFIRMED).
	Command *CommandJSON `json:"command,omitempty"`
	// Alarm is the alarm an ALARM_* event is about.
	Alarm *AlarmJSON `json:"alarm,omitempty"`
	// Job is the job a JOB_* event is about.
	Job *JobJSON `json:"job,omitempty"`
	// Rollout is the rollout a ROLLOUT_* event is about.
	Rollout *RolloutJSON `json:"rollout,omitempty"`
	// Grant is the rider grant a GRANT_REVOKED event is about.
	Grant *GrantJSON `json:"grant,omitempty"`
}

// eventJSON renders e; withIssuer shows the command's issuedBy, which a
// restricted token never sees.
func eventJSON(cursors *core.CursorCodec, e core.Event, withIssuer bool) EventJSON {
	out := EventJSON{ID: cursors.Encode(e.ID), Type: string(e.Type), OccurredAt: Time(e.OccurredAt)}
	if !e.AccountLevel() {
		uid, m := e.UID, mountJSON(e.Mount)
		out.UID, out.Mount = &uid, &m
	}
	if e.Type == core.EventStatesReported {
		out.States = make([]stateJSON, len(e.States))
		for i, st := range e.States {
			out.States[i] = toStateJSON(st)
		}
	}
	if e.Command != nil {
		c := commandJSON(*e.Command, withIssuer)
		out.Command = &c
	}
	if e.Alarm != nil {
		a := alarmJSON(*e.Alarm)
		out.Alarm = &a
	}
	if e.Job != nil {
		j := jobJSON(*e.Job)
		out.Job = &j
	}
	if e.Rollout != nil {
		ro := rolloutJSON(*e.Rollout)
		out.Rollout = &ro
	}
	if e.Grant != nil {
		// Restricted tokens with mount items never receive these.
		g := grantJSON(core.Principal{}, *e.Grant)
		out.Grant = &g
	}
	return out
}

// listEvents answers GET /api/v1/events, waiting up to wait seconds for an
// event when none follows after.
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request, p core.Principal) {
	q := newQuery(r, "after", "limit", "types", "mountUid", "wait", "tail")
	req := core.EventsRequest{MountUID: q.str("mountUid")}
	if after := q.str("after"); after != nil {
		c, err := s.Cursors.Decode(*after)
		if err != nil {
			writeError(w, r, s.Logger, err)
			return
		}
		req.After = &c
	}
	req.Limit, req.Tail = q.integer("limit"), q.integer("tail")
	if types := q.str("types"); types != nil {
		for _, t := range strings.Split(*types, ",") {
			req.Types = append(req.Types, core.EventType(strings.TrimSpace(t)))
		}
	}
	if wait := q.str("wait"); wait != nil {
		// The range is core's rule; here only the number is read.
		n, err := strconv.Atoi(*wait)
		if err != nil {
			q.v.Add("wait", "must be a number of seconds from 0 to 30")
		}
		req.Wait = time.Duration(n) * time.Second
	}
	if err := q.err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	page, err := s.Events.Events(r.Context(), p, req)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	out := make([]EventJSON, len(page.Events))
	offlineAfter := s.offlineAfter()
	for i, e := range page.Events {
		out[i] = eventJSON(s.Cursors, withPresence(e, offlineAfter), p.Role != core.RoleRestricted)
	}
	writeJSON(w, http.StatusOK, map[string]any{"events": out, "next": s.Cursors.Encode(page.Next)})
}

// offlineAfter is the presence threshold the alarm service applies, 0 when
// it does not say.
func (s *Server) offlineAfter() time.Duration {
	if a, ok := s.Alarms.(interface{ OfflineAfter() time.Duration }); ok {
		return a.OfflineAfter()
	}
	return 0
}

// withPresence gives e's mount, as the change left it, its presence at
// the event when the event does not carry one.
func withPresence(e core.Event, offlineAfter time.Duration) core.Event {
	if e.AccountLevel() {
		return e
	}
	e.Mount.Presence = core.EventPresence(e, offlineAfter)
	return e
}

// WebhookBody renders what a webhook receives for an event (docs/api.md,
// "Webhooks"): the event as GET /api/v1/events shows it, with its type and
// instant. A webhook is the account's own, so a command shows its issuer.
// offlineAfter is MOUNTD_OFFLINE_AFTER, which the mount's presence at the
// event is computed with.
func WebhookBody(cursors *core.CursorCodec, offlineAfter time.Duration) core.WebhookBody {
	return func(e core.Event) ([]byte, error) {
		e = withPresence(e, offlineAfter)
		return json.Marshal(struct {
			Type      string    `json:"type"`
			Timestamp Time      `json:"timestamp"`
			Data      EventJSON `json:"data"`
		}{string(e.Type), Time(e.OccurredAt), eventJSON(cursors, e, true)})
	}
}
