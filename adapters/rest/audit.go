package rest

import (
	"net/http"

	"github.com/mountd/mountd/core"
)

// ActorJSON is who made a change.
type ActorJSON struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	Name string `json:"name"`
}

// AuditEntryJSON is one entry of GET /api/v1/audit (docs/api.md, "Audit log").
type AuditEntryJSON struct {
	ID            string         `json:"id"`
	At            Time           `json:"at"`
	Actor         ActorJSON      `json:"actor"`
	Action        string         `json:"action"`
	Target        string         `json:"target"`
	SourceAddress string         `json:"sourceAddress"`
	Details       map[string]any `json:"details"`
}

// AuditJSON is an entry as the API and `mountd audit --json` show it.
func AuditJSON(e core.AuditEntry) AuditEntryJSON {
	details := e.Details
	if details == nil {
		details = map[string]any{}
	}
	return AuditEntryJSON{ID: e.ID, At: Time(e.At), Actor: ActorJSON{Type: string(e.Actor.Type), ID: e.Actor.ID, Name: e.Actor.Name},
		Action: string(e.Action), Target: e.Target, SourceAddress: e.SourceAddress, Details: details}
}

func (s *Server) listAudit(w http.ResponseWriter, r *http.Request, p core.Principal) {
	q := newQuery(r, "after", "limit", "actor", "action", "target", "tail")
	req := core.AuditRequest{After: q.str("after"), Limit: q.integer("limit"), Actor: q.str("actor"),
		Action: q.str("action"), Target: q.str("target"), Tail: q.integer("tail")}
	if err := q.err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	page, err := s.Audit.Audit(r.Context(), p, req)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	out := make([]AuditEntryJSON, len(page.Entries))
	for i, e := range page.Entries {
		out[i] = AuditJSON(e)
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": out, "next": page.Next})
}
