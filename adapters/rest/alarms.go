package rest

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/mountd/mountd/core"
)

// AlarmConditionJSON is one condition of a rule: {"code","op","value"} on
// the mount's latest value, or {"presence":"OFFLINE"}.
type AlarmConditionJSON struct {
	Code     string
	Op       string
	Value    string
	Presence string
}

// MarshalJSON writes the condition in the one of its two forms it has.
func (c AlarmConditionJSON) MarshalJSON() ([]byte, error) {
	if c.Presence != "" {
		return json.Marshal(struct {
			Presence string `json:"presence"`
		}{c.Presence})
	}
	return json.Marshal(struct {
		Code  string `json:"code"`
		Op    string `json:"op"`
		Value string `json:"value"`
	}{c.Code, c.Op, c.Value})
}

func conditionsJSON(cs []core.AlarmCondition) []AlarmConditionJSON {
	out := make([]AlarmConditionJSON, len(cs))
	for i, c := range cs {
		out[i] = AlarmConditionJSON{Code: string(c.Code), Op: c.Op, Value: c.Value, Presence: string(c.Presence)}
	}
	return out
}

// AlarmRuleJSON is an alarm rule as the API shows it.
type AlarmRuleJSON struct {
	ID         string               `json:"id"`
	Name       string               `json:"name"`
	Severity   string               `json:"severity"`
	Conditions []AlarmConditionJSON `json:"conditions"`
	ForSeconds int                  `json:"forSeconds"`
	MountUIDs  []string             `json:"mountUids"`
	Enabled    bool                 `json:"enabled"`
	CreatedAt  Time                 `json:"createdAt"`
	UpdatedAt  Time                 `json:"updatedAt"`
}

func alarmRuleJSON(r core.AlarmRule) AlarmRuleJSON {
	uids := r.MountUIDs
	if uids == nil {
		uids = []string{}
	}
	return AlarmRuleJSON{ID: r.ID, Name: r.Name, Severity: string(r.Severity), Conditions: conditionsJSON(r.Conditions),
		ForSeconds: r.ForSeconds, MountUIDs: uids, Enabled: r.Enabled, CreatedAt: Time(r.CreatedAt), UpdatedAt: Time(r.UpdatedAt)}
}

// SuggestedRuleJSON is a starting rule offered to an account: what
// POST /api/v1/alarm-rules would take to create it.
type SuggestedRuleJSON struct {
	Name       string               `json:"name"`
	Severity   string               `json:"severity"`
	Conditions []AlarmConditionJSON `json:"conditions"`
	ForSeconds int                  `json:"forSeconds"`
	MountUIDs  []string             `json:"mountUids"`
}

func suggestedRuleJSON(in core.AlarmRuleInput) SuggestedRuleJSON {
	out := SuggestedRuleJSON{Conditions: []AlarmConditionJSON{}, MountUIDs: []string{}}
	if in.Name != nil {
		out.Name = *in.Name
	}
	if in.Severity != nil {
		out.Severity = *in.Severity
	}
	if in.Conditions != nil {
		out.Conditions = conditionsJSON(*in.Conditions)
	}
	if in.ForSeconds != nil {
		out.ForSeconds = *in.ForSeconds
	}
	if in.MountUIDs != nil && *in.MountUIDs != nil {
		out.MountUIDs = *in.MountUIDs
	}
	return out
}

// AlarmJSON is an alarm as the API shows it.
type AlarmJSON struct {
	ID             string  `json:"id"`
	RuleID         string  `json:"ruleId"`
	RuleName       string  `json:"ruleName"`
	UID            string  `json:"uid"`
	Severity       string  `json:"severity"`
	State          string  `json:"state"`
	RaisedAt       Time    `json:"raisedAt"`
	ClearedAt      *Time   `json:"clearedAt"`
	AcknowledgedAt *Time   `json:"acknowledgedAt"`
	AcknowledgedBy *string `json:"acknowledgedBy"`
	// AcknowledgedByName is the person's username or the client's name.
	AcknowledgedByName *string           `json:"acknowledgedByName"`
	Values             map[string]string `json:"values"`
}

func alarmJSON(a core.Alarm) AlarmJSON {
	out := AlarmJSON{ID: a.ID, RuleID: a.RuleID, RuleName: a.RuleName, UID: a.UID, Severity: string(a.Severity),
		State: string(a.State), RaisedAt: Time(a.RaisedAt), Values: a.Values}
	if !a.ClearedAt.IsZero() {
		t := Time(a.ClearedAt)
		out.ClearedAt = &t
	}
	if !a.AcknowledgedAt.IsZero() {
		t := Time(a.AcknowledgedAt)
		out.AcknowledgedAt = &t
	}
	if a.AcknowledgedBy != "" {
		by, name := a.AcknowledgedBy, a.AcknowledgerName()
		out.AcknowledgedBy, out.AcknowledgedByName = &by, &name
	}
	if out.Values == nil {
		out.Values = map[string]string{}
	}
	return out
}

// alarmRuleBody is what POST and PATCH /alarm-rules take. Conditions are
// decoded one by one, so that an error names its condition.
type alarmRuleBody struct {
	Name       *string            `json:"name"`
	Severity   *string            `json:"severity"`
	Conditions *[]json.RawMessage `json:"conditions"`
	ForSeconds *int               `json:"forSeconds"`
	MountUIDs  *[]string          `json:"mountUids"`
	Enabled    *bool              `json:"enabled"`
}

// conditionBody is one condition as sent; which form it has and whether
// its values are allowed is core's to decide.
type conditionBody struct {
	Code     *string `json:"code"`
	Op       *string `json:"op"`
	Value    *string `json:"value"`
	Presence *string `json:"presence"`
}

// maxConditionsRead bounds the conditions decoded before core refuses
// more than its limit: the body limit bounds them too, this bounds work.
const maxConditionsRead = 100

func (b alarmRuleBody) input() (core.AlarmRuleInput, error) {
	in := core.AlarmRuleInput{Name: b.Name, Severity: b.Severity, ForSeconds: b.ForSeconds, MountUIDs: b.MountUIDs, Enabled: b.Enabled}
	if b.Conditions == nil {
		return in, nil
	}
	raw := *b.Conditions
	if len(raw) > maxConditionsRead {
		return in, fieldError("conditions", "must hold at most 10 conditions")
	}
	var v core.Validation
	cs := make([]core.AlarmCondition, 0, len(raw))
	for i, r := range raw {
		field := fmt.Sprintf("conditions[%d]", i)
		var c conditionBody
		if err := decodeJSONBytes(r, &c); err != nil {
			v.Fields = append(v.Fields, prefixFields(err, field)...)
			continue
		}
		cs = append(cs, core.AlarmCondition{Code: core.StateCode(deref(c.Code)), Op: deref(c.Op), Value: deref(c.Value),
			Presence: core.Presence(deref(c.Presence))})
	}
	if err := v.Err(); err != nil {
		return in, err
	}
	in.Conditions = &cs
	return in, nil
}

// prefixFields names the fields of a nested object's decoding error
// after where the object is ("conditions[1].op"); an error about the
// object as a whole names the object.
func prefixFields(err error, prefix string) []core.FieldError {
	ce, ok := err.(*core.Error)
	if !ok || len(ce.Fields) == 0 {
		return []core.FieldError{{Field: prefix, Message: "must be an object with code, op and value, or presence"}}
	}
	out := make([]core.FieldError, len(ce.Fields))
	for i, f := range ce.Fields {
		out[i] = core.FieldError{Field: prefix + "." + f.Field, Message: f.Message}
	}
	return out
}

func fieldError(field, msg string) error {
	return &core.Error{Code: core.CodeValidation, Message: "the request is invalid",
		Fields: []core.FieldError{{Field: field, Message: msg}}}
}

// decodeAlarmRule refuses a token that may not manage rules before it
// reads the body.
func (s *Server) decodeAlarmRule(w http.ResponseWriter, r *http.Request, p core.Principal) (core.AlarmRuleInput, bool) {
	if !s.allowed(w, r, p, core.ActionManageAlarmRules) {
		return core.AlarmRuleInput{}, false
	}
	var body alarmRuleBody
	if err := decodeJSON(r, &body); err != nil {
		writeError(w, r, s.Logger, err)
		return core.AlarmRuleInput{}, false
	}
	in, err := body.input()
	if err != nil {
		writeError(w, r, s.Logger, err)
		return core.AlarmRuleInput{}, false
	}
	return in, true
}

func (s *Server) createAlarmRule(w http.ResponseWriter, r *http.Request, p core.Principal) {
	in, ok := s.decodeAlarmRule(w, r, p)
	if !ok {
		return
	}
	rule, err := s.Alarms.CreateRule(r.Context(), p, in)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusCreated, alarmRuleJSON(rule))
}

// allowed answers 403 for a token whose role may not do a, before any
// look at the request: core decides again, this keeps the order of
// refusals (docs/api.md, "Conventions") whatever the request holds.
func (s *Server) allowed(w http.ResponseWriter, r *http.Request, p core.Principal, a core.Action) bool {
	if err := p.Authorize(a); err != nil {
		writeError(w, r, s.Logger, err)
		return false
	}
	return true
}

// suggestedAlarmRules answers GET /alarm-rules/suggested: the starting
// rules an owner may create as they are or changed.
func (s *Server) suggestedAlarmRules(w http.ResponseWriter, r *http.Request, p core.Principal) {
	if err := newQuery(r).err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	if !s.allowed(w, r, p, core.ActionManageAlarmRules) {
		return
	}
	suggested := s.Alarms.SuggestedRules()
	out := make([]SuggestedRuleJSON, len(suggested))
	for i, in := range suggested {
		out[i] = suggestedRuleJSON(in)
	}
	writeJSON(w, http.StatusOK, map[string]any{"rules": out})
}

func (s *Server) updateAlarmRule(w http.ResponseWriter, r *http.Request, p core.Principal) {
	in, ok := s.decodeAlarmRule(w, r, p)
	if !ok {
		return
	}
	rule, err := s.Alarms.UpdateRule(r.Context(), p, r.PathValue("id"), in)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, alarmRuleJSON(rule))
}

func (s *Server) deleteAlarmRule(w http.ResponseWriter, r *http.Request, p core.Principal) {
	if !s.allowed(w, r, p, core.ActionManageAlarmRules) {
		return
	}
	if err := s.Alarms.DeleteRule(r.Context(), p, r.PathValue("id")); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listAlarms(w http.ResponseWriter, r *http.Request, p core.Principal) {
	q := newQuery(r, "state", "severity", "mountUid", "ruleId", "currentPage", "pageSize")
	page := q.page(20)
	f := core.AlarmFilter{MountUID: q.str("mountUid"), RuleID: q.str("ruleId")}
	if st := q.str("state"); st != nil {
		state := core.AlarmState(*st)
		f.State = &state
	}
	if sv := q.str("severity"); sv != nil {
		sev := core.Severity(*sv)
		f.Severity = &sev
	}
	if err := q.err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	alarms, pagination, err := s.Alarms.ListAlarms(r.Context(), p, f, page)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	out := make([]AlarmJSON, len(alarms))
	for i, a := range alarms {
		out[i] = alarmJSON(a)
	}
	writeJSON(w, http.StatusOK, map[string]any{"alarms": out, "pagination": pagination})
}

func (s *Server) acknowledgeAlarm(w http.ResponseWriter, r *http.Request, p core.Principal) {
	if !s.allowed(w, r, p, core.ActionAcknowledgeAlarm) {
		return
	}
	a, err := s.Alarms.Acknowledge(r.Context(), p, r.PathValue("id"))
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, alarmJSON(a))
}
