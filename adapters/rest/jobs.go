package rest

import (
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/mountd/mountd/core"
)

// JobCountsJSON counts a job's targets by status; each target counts once.
type JobCountsJSON struct {
	Pending     int `json:"pending"`
	Issued      int `json:"issued"`
	Executed    int `json:"executed"`
	Refused     int `json:"refused"`
	Unconfirmed int `json:"unconfirmed"`
}

// JobJSON is a job as the API shows it (docs/api.md, "Jobs").
type JobJSON struct {
	ID     string            `json:"id"`
	Code   string            `json:"code"`
	Params map[string]string `json:"params"`
	// Filter is the fleet filter the targets were selected with, "" for a
	// job created with mountUids.
	Filter      string        `json:"filter"`
	Description string        `json:"description"`
	State       string        `json:"state"`
	CreatedAt   Time          `json:"createdAt"`
	ExpiresAt   Time          `json:"expiresAt"`
	Targets     int           `json:"targets"`
	Counts      JobCountsJSON `json:"counts"`
}

func jobJSON(j core.Job) JobJSON {
	params := j.Params
	if params == nil {
		params = map[string]string{}
	}
	c := j.Counts
	return JobJSON{ID: j.ID, Code: string(j.Code), Params: params, Filter: j.Filter, Description: j.Description,
		State: string(j.State), CreatedAt: Time(j.CreatedAt), ExpiresAt: Time(j.ExpiresAt), Targets: j.Targets,
		Counts: JobCountsJSON(c)}
}

// JobTargetJSON is a job at one of its mounts.
type JobTargetJSON struct {
	UID    string `json:"uid"`
	Status string `json:"status"`
	// CommandID is the deciding or latest command; null while PENDING.
	CommandID *string `json:"commandId"`
}

func jobTargetJSON(t core.JobTarget) JobTargetJSON {
	out := JobTargetJSON{UID: t.UID, Status: string(t.Status)}
	if t.CommandID != "" {
		id := t.CommandID
		out.CommandID = &id
	}
	return out
}

// jobBody is what POST /jobs takes. Pointers tell an absent field from an
// empty one: "filter":"" selects every mount, "mountUids":[] none, and
// giving both is core's to refuse.
type jobBody struct {
	Code        *string                     `json:"code"`
	Params      *map[string]json.RawMessage `json:"params"`
	Filter      *string                     `json:"filter"`
	MountUIDs   *[]string                   `json:"mountUids"`
	Description *string                     `json:"description"`
	ExpiresAt   *string                     `json:"expiresAt"`
}

func (b jobBody) input() (core.JobInput, error) {
	in := core.JobInput{Code: deref(b.Code), Filter: b.Filter, Description: deref(b.Description)}
	if b.Params != nil {
		params, err := jobParams(*b.Params)
		if err != nil {
			return in, err
		}
		in.Params = params
	}
	if b.MountUIDs != nil {
		in.MountUIDs = *b.MountUIDs
	}
	if b.ExpiresAt != nil {
		t, err := time.Parse(time.RFC3339Nano, *b.ExpiresAt)
		if err != nil {
			return in, fieldError("expiresAt", "must be an RFC 3339 date-time")
		}
		t = t.UTC()
		in.ExpiresAt = &t
	}
	return in, nil
}

// jobParams reads params one by one, so that a value that is not a string
// is named ("params.alarmMode"); which names and values a code takes is
// core's to decide.
func jobParams(raw map[string]json.RawMessage) (map[string]string, error) {
	names := make([]string, 0, len(raw))
	for name := range raw {
		names = append(names, name)
	}
	slices.Sort(names)
	var v core.Validation
	params := make(map[string]string, len(raw))
	for _, name := range names {
		var val *string
		if err := json.Unmarshal(raw[name], &val); err != nil || val == nil {
			v.Add("params."+name, "must be a string")
			continue
		}
		params[name] = *val
	}
	return params, v.Err()
}

func (s *Server) createJob(w http.ResponseWriter, r *http.Request, p core.Principal) {
	if !s.allowed(w, r, p, core.ActionManageJobs) {
		return
	}
	var body jobBody
	if err := decodeJSON(r, &body); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	in, err := body.input()
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	j, err := s.Jobs.CreateJob(r.Context(), p, in)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusCreated, jobJSON(j))
}

// pendingCommands answers GET /mounts/{uid}/pending-commands: a phone near
// the mount gets a freshly signed command for each job waiting there.
func (s *Server) pendingCommands(w http.ResponseWriter, r *http.Request, p core.Principal) {
	if err := newQuery(r).err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	cmds, err := s.Mounts.PendingCommands(r.Context(), p, r.PathValue("uid"))
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"commands": commandsJSON(cmds, false)})
}
