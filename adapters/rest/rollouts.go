package rest

import (
	"context"
	"net/http"

	"github.com/mountd/mountd/core"
)

// RolloutCountsJSON counts a rollout's targets by state; each target
// counts once.
type RolloutCountsJSON struct {
	Pending    int `json:"pending"`
	Eligible   int `json:"eligible"`
	Installing int `json:"installing"`
	Healthy    int `json:"healthy"`
	Failed     int `json:"failed"`
}

// RolloutJSON is a rollout as the API shows it (docs/api.md, "Rollouts").
type RolloutJSON struct {
	ID               string `json:"id"`
	ModelNumber      string `json:"modelNumber"`
	SoftwareRevision string `json:"softwareRevision"`
	// Filter is the fleet filter that narrowed the targets, "" for none.
	Filter           string `json:"filter"`
	Phases           []int  `json:"phases"`
	FailureThreshold int    `json:"failureThreshold"`
	MinSample        int    `json:"minSample"`
	// HealthWindow is a Go duration ("1h0m0s").
	HealthWindow string `json:"healthWindow"`
	RequireIdle  bool   `json:"requireIdle"`
	State        string `json:"state"`
	// PausedReason is FAILURE_THRESHOLD or MANUAL while PAUSED, else null.
	PausedReason *string           `json:"pausedReason"`
	OpenPhase    int               `json:"openPhase"`
	Targets      int               `json:"targets"`
	Counts       RolloutCountsJSON `json:"counts"`
	CreatedAt    Time              `json:"createdAt"`
	// EndedAt is when it became COMPLETED or CANCELED, else null.
	EndedAt *Time `json:"endedAt"`
}

func rolloutJSON(r core.Rollout) RolloutJSON {
	phases := r.Phases
	if phases == nil {
		phases = []int{}
	}
	out := RolloutJSON{ID: r.ID, ModelNumber: r.ModelNumber, SoftwareRevision: r.SoftwareRevision, Filter: r.Filter,
		Phases: phases, FailureThreshold: r.FailureThreshold, MinSample: r.MinSample,
		HealthWindow: r.HealthWindow.String(), RequireIdle: r.RequireIdle, State: string(r.State),
		OpenPhase: r.OpenPhase, Targets: r.Targets, Counts: RolloutCountsJSON(r.Counts), CreatedAt: Time(r.CreatedAt)}
	if r.State == core.RolloutPaused && r.PausedReason != "" {
		reason := r.PausedReason
		out.PausedReason = &reason
	}
	if !r.EndedAt.IsZero() {
		t := Time(r.EndedAt)
		out.EndedAt = &t
	}
	return out
}

// RolloutTargetJSON is a rollout at one of its mounts.
type RolloutTargetJSON struct {
	UID   string `json:"uid"`
	State string `json:"state"`
	Phase int    `json:"phase"`
	// CommandID is the latest INSTALL_FIRMWARE signed for the mount; null
	// before any.
	CommandID *string `json:"commandId"`
	// InstallingSince is when the command was first fetched; null before.
	InstallingSince *Time `json:"installingSince"`
	// Reason says why a target FAILED; null otherwise.
	Reason *string `json:"reason"`
}

func rolloutTargetJSON(t core.RolloutTarget) RolloutTargetJSON {
	out := RolloutTargetJSON{UID: t.UID, State: string(t.State), Phase: t.Phase}
	if t.CommandID != "" {
		id := t.CommandID
		out.CommandID = &id
	}
	if !t.InstallingSince.IsZero() {
		at := Time(t.InstallingSince)
		out.InstallingSince = &at
	}
	if t.Reason != "" {
		reason := t.Reason
		out.Reason = &reason
	}
	return out
}

// rolloutBody is what POST /rollouts takes; absent (or null) fields take
// core's defaults.
type rolloutBody struct {
	ModelNumber      *string `json:"modelNumber"`
	SoftwareRevision *string `json:"softwareRevision"`
	Filter           *string `json:"filter"`
	Phases           *[]int  `json:"phases"`
	FailureThreshold *int    `json:"failureThreshold"`
	MinSample        *int    `json:"minSample"`
	HealthWindow     *string `json:"healthWindow"`
	RequireIdle      *bool   `json:"requireIdle"`
}

func (b rolloutBody) input() core.RolloutInput {
	in := core.RolloutInput{ModelNumber: deref(b.ModelNumber), SoftwareRevision: deref(b.SoftwareRevision),
		Filter: b.Filter, FailureThreshold: b.FailureThreshold, MinSample: b.MinSample,
		HealthWindow: b.HealthWindow, RequireIdle: b.RequireIdle}
	if b.Phases != nil {
		// "phases":[] is given and empty, which core refuses; only an
		// absent list takes the default.
		in.Phases = append([]int{}, *b.Phases...)
	}
	return in
}

func (s *Server) createRollout(w http.ResponseWriter, r *http.Request, p core.Principal) {
	if !s.allowed(w, r, p, core.ActionManageRollouts) {
		return
	}
	var body rolloutBody
	if err := decodeJSON(r, &body); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	ro, err := s.Rollouts.CreateRollout(r.Context(), p, body.input())
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusCreated, rolloutJSON(ro))
}

func (s *Server) listRollouts(w http.ResponseWriter, r *http.Request, p core.Principal) {
	if !s.allowed(w, r, p, core.ActionManageRollouts) {
		return
	}
	q := newQuery(r, "currentPage", "pageSize")
	page := q.page(20)
	if err := q.err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	list, pagination, err := s.Rollouts.ListRollouts(r.Context(), p, page)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	out := make([]RolloutJSON, len(list))
	for i, ro := range list {
		out[i] = rolloutJSON(ro)
	}
	writeJSON(w, http.StatusOK, map[string]any{"rollouts": out, "pagination": pagination})
}

func (s *Server) getRollout(w http.ResponseWriter, r *http.Request, p core.Principal) {
	if !s.allowed(w, r, p, core.ActionManageRollouts) {
		return
	}
	if err := newQuery(r).err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	ro, err := s.Rollouts.Rollout(r.Context(), p, r.PathValue("id"))
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, rolloutJSON(ro))
}

func (s *Server) rolloutMounts(w http.ResponseWriter, r *http.Request, p core.Principal) {
	if !s.allowed(w, r, p, core.ActionManageRollouts) {
		return
	}
	q := newQuery(r, "currentPage", "pageSize")
	page := q.page(20)
	if err := q.err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	targets, pagination, err := s.Rollouts.RolloutMounts(r.Context(), p, r.PathValue("id"), page)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	out := make([]RolloutTargetJSON, len(targets))
	for i, t := range targets {
		out[i] = rolloutTargetJSON(t)
	}
	writeJSON(w, http.StatusOK, map[string]any{"mounts": out, "pagination": pagination})
}

// changeRollout answers pause, resume and cancel (a method expression of
// Rollouts): 200 with the rollout as the change left it.
func (s *Server) changeRollout(change func(Rollouts, context.Context, core.Principal, string) (core.Rollout, error)) func(http.ResponseWriter, *http.Request, core.Principal) {
	return func(w http.ResponseWriter, r *http.Request, p core.Principal) {
		if !s.allowed(w, r, p, core.ActionManageRollouts) {
			return
		}
		if err := newQuery(r).err(); err != nil {
			writeError(w, r, s.Logger, err)
			return
		}
		ro, err := change(s.Rollouts, r.Context(), p, r.PathValue("id"))
		if err != nil {
			writeError(w, r, s.Logger, err)
			return
		}
		writeJSON(w, http.StatusOK, rolloutJSON(ro))
	}
}
