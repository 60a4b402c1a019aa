package graph

import (
	"time"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/graph/model"
)

func dateTime(t time.Time) model.DateTime { return model.DateTime(t) }

func optDateTime(t time.Time) *model.DateTime {
	if t.IsZero() {
		return nil
	}
	d := model.DateTime(t)
	return &d
}

func toMount(m core.Mount) *model.Mount {
	return &model.Mount{UID: m.UID, Name: m.Name, SerialNumber: m.SerialNumber, MacAddress: m.MACAddress,
		FirmwareRevision: m.FirmwareRevision, SoftwareRevision: m.SoftwareRevision, ModelNumber: m.ModelNumber,
		AssociationState: string(m.State), MountLocked: m.Latest.MountLocked, HelmetMounted: m.Latest.HelmetMounted,
		BatteryLevel: m.Latest.BatteryLevel, CPUTemperature: m.Latest.CPUTemperature, AssociatedAt: optDateTime(m.AssociatedAt),
		LastReportAt: optDateTime(lastReport(m.Latest)), AssociationDeadline: optDateTime(m.IdleDeadline),
		DevicePublicKey: optString(m.DevicePublicKey), UnverifiedStates: unverifiedStates(m.Latest),
		LastSeenAt: optDateTime(m.LastSeenAt), Presence: toPresence(m), Offline: toMountOffline(m.Offline)}
}

func toMountOffline(o *core.MountOffline) *model.MountOffline {
	if o == nil {
		return nil
	}
	return &model.MountOffline{RevocationVersion: o.RevocationVersion, LogPending: o.LogPending, TimeTrusted: o.TimeTrusted, At: dateTime(o.At)}
}

// unverifiedStates lists the codes whose latest value was not signed, in
// the order of the state codes.
func unverifiedStates(l core.LatestStates) []string {
	out := []string{}
	for _, c := range core.StateCodes {
		if verified, ok := l.Verified[c]; ok && !verified {
			out = append(out, string(c))
		}
	}
	return out
}

// optString is s, or null when empty.
func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// lastReport is the newest instant among the latest values (zero: none).
func lastReport(l core.LatestStates) time.Time {
	var last time.Time
	for _, at := range l.At {
		if at.After(last) {
			last = at
		}
	}
	return last
}

func toPagination(p core.Pagination) *model.Pagination {
	return &model.Pagination{CurrentPage: p.CurrentPage, PageSize: p.PageSize, TotalItems: p.TotalItems, TotalPages: p.TotalPages}
}

func toState(e core.StateEntry) model.MountState {
	return model.MountState{Code: string(e.Code), Value: e.Value, OccurredAt: dateTime(e.OccurredAt), ReceivedAt: optDateTime(e.ReceivedAt),
		Verified: e.Verified}
}

func toStates(entries []core.StateEntry) []model.MountState {
	out := make([]model.MountState, len(entries))
	for i, e := range entries {
		out[i] = toState(e)
	}
	return out
}

func toCommand(c core.Command, withIssuer bool) model.Command {
	out := model.Command{ID: c.ID, Code: string(c.Code), Data: c.Data, GeneratedAt: dateTime(c.GeneratedAt), Payload: optString(c.Payload),
		Status: model.CommandStatus(c.Status), StatusAt: optDateTime(c.StatusAt), Reason: optString(c.Reason), Verified: c.Verified,
		JobID: optString(c.JobID), RolloutID: optString(c.RolloutID), GrantID: optString(c.GrantID)}
	if out.Status == "" {
		out.Status = model.CommandStatusIssued
	}
	if c.SignedToken != "" {
		tok := c.SignedToken
		out.SignedToken = &tok
	}
	if withIssuer {
		issuer, name := c.IssuedBy, c.IssuerName()
		out.IssuedBy, out.IssuedByName = &issuer, &name
	}
	return out
}

func toCommands(cmds []core.Command, withIssuer bool) []model.Command {
	out := make([]model.Command, len(cmds))
	for i, c := range cmds {
		out[i] = toCommand(c, withIssuer)
	}
	return out
}

func toTag(t core.NfcTag) model.NfcTag {
	uids := t.MountUIDs
	if uids == nil {
		uids = []string{}
	}
	return model.NfcTag{UID: t.UID, Name: t.Name, Color: t.Color, IconName: t.IconName, MountUids: uids,
		CreatedAt: dateTime(t.CreatedAt), UpdatedAt: dateTime(t.UpdatedAt)}
}

func toFirmware(v core.FirmwareVersion) *model.FirmwareVersion {
	return &model.FirmwareVersion{SoftwareRevision: v.SoftwareRevision, ModelNumber: v.ModelNumber,
		AvailableSince: dateTime(v.AvailableSince), Deprecated: v.Deprecated, Mandatory: v.Mandatory, Sha256: v.SHA256, Size: int(v.Size)}
}

// page turns GraphQL page arguments into a core page, validated like REST.
func page(currentPage, pageSize *int, defaultSize int) (core.Page, error) {
	var v core.Validation
	p := core.NewPage(currentPage, pageSize, defaultSize, &v)
	return p, v.Err()
}

// webhookInput is a webhook's writable fields as core takes them; a list
// left out (nil) stays as it is.
func webhookInput(url *string, types []model.MountEventType, uids []string, description *string, enabled *bool) core.WebhookInput {
	in := core.WebhookInput{URL: url, Description: description, Enabled: enabled}
	if types != nil {
		list := make([]core.EventType, len(types))
		for i, t := range types {
			list[i] = core.EventType(t)
		}
		in.EventTypes = &list
	}
	if uids != nil {
		in.MountUIDs = &uids
	}
	return in
}

func toWebhook(w core.Webhook) *model.Webhook {
	types := make([]model.MountEventType, len(w.EventTypes))
	for i, t := range w.EventTypes {
		types[i] = model.MountEventType(t)
	}
	return &model.Webhook{ID: w.ID, URL: w.URL, EventTypes: types, MountUids: w.MountUIDs, Description: w.Description,
		Enabled: w.Enabled, CreatedAt: dateTime(w.CreatedAt), UpdatedAt: dateTime(w.UpdatedAt)}
}

func toDelivery(cursors *core.CursorCodec, d core.Delivery) model.WebhookDelivery {
	out := model.WebhookDelivery{ID: d.ID, EventID: cursors.Encode(d.EventID), EventType: model.MountEventType(d.EventType),
		Attempt: d.Attempt, Status: string(d.Status)}
	if d.ResponseStatus != 0 {
		out.ResponseStatus = &d.ResponseStatus
	}
	if d.Error != "" {
		out.Error = &d.Error
	}
	if !d.AttemptedAt.IsZero() {
		ms, at := int(d.Duration.Milliseconds()), dateTime(d.AttemptedAt)
		out.DurationMs, out.AttemptedAt = &ms, &at
	}
	if !d.NextAttemptAt.IsZero() {
		next := dateTime(d.NextAttemptAt)
		out.NextAttemptAt = &next
	}
	return out
}

func toAuditEntry(e core.AuditEntry) model.AuditEntry {
	details := e.Details
	if details == nil {
		details = map[string]any{}
	}
	return model.AuditEntry{ID: e.ID, At: dateTime(e.At),
		Actor:  &model.AuditActor{Type: string(e.Actor.Type), ID: e.Actor.ID, Name: e.Actor.Name},
		Action: string(e.Action), Target: e.Target, SourceAddress: e.SourceAddress, Details: details}
}

// toPresence is a mount's presence; core computes it when it reads the
// mount, and a mount never heard from is UNKNOWN.
func toPresence(m core.Mount) model.Presence {
	if m.Presence == "" {
		return model.PresenceUnknown
	}
	return model.Presence(m.Presence)
}

// alarmRuleInput is a rule's writable fields as core takes them; a field
// left out (nil) stays as it is.
func alarmRuleInput(name *string, severity *model.AlarmSeverity, conditions []model.AlarmConditionInput, forSeconds *int, uids []string, enabled *bool) core.AlarmRuleInput {
	in := core.AlarmRuleInput{Name: name, ForSeconds: forSeconds, Enabled: enabled}
	if severity != nil {
		s := string(*severity)
		in.Severity = &s
	}
	if conditions != nil {
		list := make([]core.AlarmCondition, len(conditions))
		for i, c := range conditions {
			list[i] = core.AlarmCondition{Code: core.StateCode(deref(c.Code)), Op: deref(c.Op), Value: deref(c.Value)}
			if c.Presence != nil {
				list[i].Presence = core.Presence(*c.Presence)
			}
		}
		in.Conditions = &list
	}
	if uids != nil {
		in.MountUIDs = &uids
	}
	return in
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func toConditions(cs []core.AlarmCondition) []model.AlarmCondition {
	out := make([]model.AlarmCondition, len(cs))
	for i, c := range cs {
		if c.Presence != "" {
			p := model.Presence(c.Presence)
			out[i] = model.AlarmCondition{Presence: &p}
			continue
		}
		out[i] = model.AlarmCondition{Code: optString(string(c.Code)), Op: optString(c.Op), Value: &cs[i].Value}
	}
	return out
}

func toAlarmRule(r core.AlarmRule) *model.AlarmRule {
	uids := r.MountUIDs
	if uids == nil {
		uids = []string{}
	}
	return &model.AlarmRule{ID: r.ID, Name: r.Name, Severity: model.AlarmSeverity(r.Severity), Conditions: toConditions(r.Conditions),
		ForSeconds: r.ForSeconds, MountUids: uids, Enabled: r.Enabled, CreatedAt: dateTime(r.CreatedAt), UpdatedAt: dateTime(r.UpdatedAt)}
}

func toSuggestedRule(in core.AlarmRuleInput) model.SuggestedAlarmRule {
	out := model.SuggestedAlarmRule{Name: deref(in.Name), Conditions: []model.AlarmCondition{}}
	if in.Severity != nil {
		out.Severity = model.AlarmSeverity(*in.Severity)
	}
	if in.Conditions != nil {
		out.Conditions = toConditions(*in.Conditions)
	}
	if in.ForSeconds != nil {
		out.ForSeconds = *in.ForSeconds
	}
	return out
}

func toAlarm(a core.Alarm) *model.Alarm {
	values := make(map[string]any, len(a.Values))
	for code, v := range a.Values {
		values[code] = v
	}
	return &model.Alarm{ID: a.ID, RuleID: a.RuleID, RuleName: a.RuleName, UID: a.UID, Severity: model.AlarmSeverity(a.Severity),
		State: model.AlarmState(a.State), RaisedAt: dateTime(a.RaisedAt), ClearedAt: optDateTime(a.ClearedAt),
		AcknowledgedAt: optDateTime(a.AcknowledgedAt), AcknowledgedBy: optString(a.AcknowledgedBy),
		AcknowledgedByName: optString(a.AcknowledgerName()), Values: values}
}

// commandParams is a command's parameters as core takes them, by their
// REST names.
func commandParams(params *model.CommandParamsInput) core.CommandParams {
	cp := core.CommandParams{}
	if params == nil {
		return cp
	}
	for name, v := range map[string]*string{"alarmMode": params.AlarmMode, "alarmSensitivity": params.AlarmSensitivity,
		"alarmVolume": params.AlarmVolume, "rfidMode": params.RfidMode, "tagUid": params.TagUID, "revision": params.Revision} {
		if v != nil {
			cp[name] = *v
		}
	}
	return cp
}

func jobInput(in model.CreateJobInput) core.JobInput {
	out := core.JobInput{Code: in.Code, Params: commandParams(in.Params), Filter: in.Filter, MountUIDs: in.MountUids,
		Description: deref(in.Description)}
	if in.ExpiresAt != nil {
		at := time.Time(*in.ExpiresAt)
		out.ExpiresAt = &at
	}
	return out
}

func toJob(j core.Job) *model.Job {
	params := make(map[string]any, len(j.Params))
	for name, v := range j.Params {
		params[name] = v
	}
	return &model.Job{ID: j.ID, Code: string(j.Code), Params: params, Filter: optString(j.Filter), Description: j.Description,
		State: model.JobState(j.State), CreatedAt: dateTime(j.CreatedAt), ExpiresAt: dateTime(j.ExpiresAt), Targets: j.Targets,
		Counts: &model.JobCounts{Pending: j.Counts.Pending, Issued: j.Counts.Issued, Executed: j.Counts.Executed,
			Refused: j.Counts.Refused, Unconfirmed: j.Counts.Unconfirmed}}
}

func toJobMount(t core.JobTarget) model.JobMount {
	status := model.JobMountStatus(t.Status)
	if status == "" {
		status = model.JobMountStatusPending
	}
	return model.JobMount{UID: t.UID, Status: status, CommandID: optString(t.CommandID)}
}

func rolloutInput(in model.RolloutInput) core.RolloutInput {
	return core.RolloutInput{ModelNumber: in.ModelNumber, SoftwareRevision: in.SoftwareRevision, Filter: in.Filter, Phases: in.Phases,
		FailureThreshold: in.FailureThreshold, MinSample: in.MinSample, HealthWindow: in.HealthWindow, RequireIdle: in.RequireIdle}
}

func toRollout(r core.Rollout) *model.Rollout {
	phases := r.Phases
	if phases == nil {
		phases = []int{}
	}
	out := &model.Rollout{ID: r.ID, ModelNumber: r.ModelNumber, SoftwareRevision: r.SoftwareRevision, Filter: optString(r.Filter),
		Phases: phases, FailureThreshold: r.FailureThreshold, MinSample: r.MinSample, HealthWindow: r.HealthWindow.String(),
		RequireIdle: r.RequireIdle, State: model.RolloutState(r.State), OpenPhase: r.OpenPhase, Targets: r.Targets,
		Counts: &model.RolloutCounts{Pending: r.Counts.Pending, Eligible: r.Counts.Eligible, Installing: r.Counts.Installing,
			Healthy: r.Counts.Healthy, Failed: r.Counts.Failed},
		CreatedAt: dateTime(r.CreatedAt), EndedAt: optDateTime(r.EndedAt)}
	if r.State == core.RolloutPaused && r.PausedReason != "" {
		reason := model.RolloutPausedReason(r.PausedReason)
		out.PausedReason = &reason
	}
	return out
}

func toRolloutTarget(t core.RolloutTarget) model.RolloutTarget {
	state := model.RolloutTargetState(t.State)
	if state == "" {
		state = model.RolloutTargetStatePending
	}
	return model.RolloutTarget{UID: t.UID, State: state, Phase: t.Phase, CommandID: optString(t.CommandID),
		InstallingSince: optDateTime(t.InstallingSince), Reason: optString(t.Reason), UpdatedAt: dateTime(t.UpdatedAt)}
}

// toMountRollout is a rollout with its target at one mount.
func toMountRollout(o core.RolloutOffer) model.MountRollout {
	t := toRolloutTarget(o.Target)
	return model.MountRollout{Rollout: toRollout(o.Rollout), Target: &t}
}

// toGrant is g as p may see it: no label for a token limited to its mounts.
func toGrant(p core.Principal, g core.RiderGrant) *model.Grant {
	out := &model.Grant{ID: g.ID, UID: g.UID, RiderKey: g.RiderKey, Rights: g.Rights, NotBefore: dateTime(g.NotBefore),
		NotAfter: dateTime(g.NotAfter), Epoch: g.Epoch, CreatedAt: dateTime(g.CreatedAt), RevokedAt: optDateTime(g.RevokedAt),
		Text: g.Text, Signature: g.Signature, Uses: g.Uses, LastUsedAt: optDateTime(g.LastUsedAt)}
	if !p.LimitedToMounts() {
		out.Label = &g.Label
	}
	return out
}
