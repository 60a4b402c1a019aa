package rest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/protocol"
)

// MountJSON is a Mount as the API shows it.
type MountJSON struct {
	UID              string   `json:"uid"`
	Name             string   `json:"name"`
	SerialNumber     string   `json:"serialNumber"`
	MACAddress       string   `json:"macAddress"`
	FirmwareRevision string   `json:"firmwareRevision"`
	SoftwareRevision string   `json:"softwareRevision"`
	ModelNumber      string   `json:"modelNumber"`
	AssociationState string   `json:"associationState"`
	MountLocked      *bool    `json:"mountLocked"`
	HelmetMounted    *bool    `json:"helmetMounted"`
	BatteryLevel     *int     `json:"batteryLevel"`
	CPUTemperature   *float64 `json:"cpuTemperature"`
	AssociatedAt     *Time    `json:"associatedAt"`
	// DevicePublicKey is the mount's own Ed25519 key pinned at association
	// (64 lowercase hex), null for older firmware.
	DevicePublicKey *string `json:"devicePublicKey"`
	// LastSeenAt is the server's time of the last accepted report or
	// receipt upload (null before any); Presence is computed from it.
	LastSeenAt *Time  `json:"lastSeenAt"`
	Presence   string `json:"presence"`
	// Offline is what a phone last told of the mount's offline access
	// (null before any during this association).
	Offline *MountOfflineJSON `json:"offline"`
}

// MountOfflineJSON is Mount.offline.
type MountOfflineJSON struct {
	RevocationVersion int64 `json:"revocationVersion"`
	LogPending        int   `json:"logPending"`
	TimeTrusted       bool  `json:"timeTrusted"`
	At                Time  `json:"at"`
}

func mountJSON(m core.Mount) MountJSON {
	out := MountJSON{UID: m.UID, Name: m.Name, SerialNumber: m.SerialNumber, MACAddress: m.MACAddress,
		FirmwareRevision: m.FirmwareRevision, SoftwareRevision: m.SoftwareRevision, ModelNumber: m.ModelNumber,
		AssociationState: string(m.State), MountLocked: m.Latest.MountLocked, HelmetMounted: m.Latest.HelmetMounted,
		BatteryLevel: m.Latest.BatteryLevel, CPUTemperature: m.Latest.CPUTemperature}
	if !m.AssociatedAt.IsZero() {
		t := Time(m.AssociatedAt)
		out.AssociatedAt = &t
	}
	if m.DevicePublicKey != "" {
		k := m.DevicePublicKey
		out.DevicePublicKey = &k
	}
	out.Presence = string(m.Presence)
	if !m.LastSeenAt.IsZero() {
		t := Time(m.LastSeenAt)
		out.LastSeenAt = &t
	}
	if out.Presence == "" && out.LastSeenAt == nil {
		out.Presence = string(core.PresenceUnknown)
	}
	if o := m.Offline; o != nil {
		out.Offline = &MountOfflineJSON{RevocationVersion: o.RevocationVersion, LogPending: o.LogPending, TimeTrusted: o.TimeTrusted, At: Time(o.At)}
	}
	return out
}

// CommandJSON is a Command as the API shows it.
type CommandJSON struct {
	// ID is the payload's nonce.
	ID          string         `json:"id"`
	Code        string         `json:"code"`
	Data        map[string]any `json:"data"`
	GeneratedAt Time           `json:"generatedAt"`
	// Payload is null for an offline use, which the server never signed.
	Payload     *string `json:"payload"`
	SignedToken *string `json:"signedToken"`
	IssuedBy    string  `json:"issuedBy,omitempty"`
	// IssuedByName is the issuer's name when it issued the command (the
	// id for commands issued before names were kept).
	IssuedByName string `json:"issuedByName,omitempty"`
	// The lifecycle: ISSUED, EXECUTED, REFUSED or UNCONFIRMED since
	// statusAt (the server's clock); reason is the mount's for REFUSED;
	// verified says the deciding receipt was signed.
	Status   string  `json:"status"`
	StatusAt *Time   `json:"statusAt"`
	Reason   *string `json:"reason"`
	Verified bool    `json:"verified"`
	// JobID is the job the command was signed for (pending-commands);
	// absent for a command asked for directly.
	JobID string `json:"jobId,omitempty"`
	// RolloutID is the rollout an INSTALL_FIRMWARE was signed for
	// (pending-commands); absent for a command asked for directly.
	RolloutID string `json:"rolloutId,omitempty"`
	// GrantID is an offline use's rider grant; absent otherwise.
	GrantID string `json:"grantId,omitempty"`
}

func commandJSON(c core.Command, withIssuer bool) CommandJSON {
	out := CommandJSON{ID: c.ID, Code: string(c.Code), Data: c.Data, GeneratedAt: Time(c.GeneratedAt),
		Status: string(c.Status), Verified: c.Verified, JobID: c.JobID, RolloutID: c.RolloutID, GrantID: c.GrantID}
	if c.Payload != "" {
		payload := c.Payload
		out.Payload = &payload
	}
	if out.Status == "" {
		out.Status = string(core.CommandIssued)
	}
	if !c.StatusAt.IsZero() {
		at := Time(c.StatusAt)
		out.StatusAt = &at
	}
	if c.Reason != "" {
		reason := c.Reason
		out.Reason = &reason
	}
	if c.SignedToken != "" {
		tok := c.SignedToken
		out.SignedToken = &tok
	}
	if withIssuer {
		out.IssuedBy, out.IssuedByName = c.IssuedBy, c.IssuerName()
	}
	return out
}

func commandsJSON(cmds []core.Command, withIssuer bool) []CommandJSON {
	out := make([]CommandJSON, len(cmds))
	for i, c := range cmds {
		out[i] = commandJSON(c, withIssuer)
	}
	return out
}

func (s *Server) listMounts(w http.ResponseWriter, r *http.Request, p core.Principal) {
	q := newQuery(r, "currentPage", "pageSize", "macAddress", "mountUid", "serialNumber", "filter")
	page := q.page(20)
	f := core.MountFilter{MACAddress: q.str("macAddress"), MountUID: q.str("mountUid"), SerialNumber: q.str("serialNumber")}
	if expr := q.str("filter"); expr != nil {
		f.Expression = *expr
	}
	if err := q.err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	mounts, pagination, err := s.Mounts.ListMounts(r.Context(), p, f, page)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	out := make([]MountJSON, len(mounts))
	for i, m := range mounts {
		out[i] = mountJSON(m)
	}
	writeJSON(w, http.StatusOK, map[string]any{"mounts": out, "pagination": pagination})
}

type associationRequest struct {
	UID              *string `json:"uid"`
	SerialNumber     *string `json:"serialNumber"`
	MACAddress       *string `json:"macAddress"`
	FirmwareRevision *string `json:"firmwareRevision"`
	SoftwareRevision *string `json:"softwareRevision"`
	ModelNumber      *string `json:"modelNumber"`
	Name             *string `json:"name"`
	DevicePublicKey  *string `json:"devicePublicKey"`
}

func (s *Server) requestAssociation(w http.ResponseWriter, r *http.Request, p core.Principal) {
	if err := p.Authorize(core.ActionRequestAssociation); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	var body associationRequest
	if err := decodeJSON(r, &body); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	uid := ""
	if body.UID != nil {
		uid = *body.UID
	}
	cmds, err := s.Mounts.RequestAssociation(r.Context(), p, uid, core.MountFields{
		Name: body.Name, SerialNumber: body.SerialNumber, MACAddress: body.MACAddress,
		FirmwareRevision: body.FirmwareRevision, SoftwareRevision: body.SoftwareRevision, ModelNumber: body.ModelNumber,
		DevicePublicKey: body.DevicePublicKey})
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, commandsJSON(cmds, false))
}

func (s *Server) confirmAssociation(w http.ResponseWriter, r *http.Request, p core.Principal) {
	m, err := s.Mounts.ConfirmAssociation(r.Context(), p, r.PathValue("uid"))
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, mountJSON(m))
}

func (s *Server) getMount(w http.ResponseWriter, r *http.Request, p core.Principal) {
	if err := newQuery(r).err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	m, err := s.Mounts.Mount(r.Context(), p, r.PathValue("uid"))
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, []MountJSON{mountJSON(m)})
}

type mountPatch struct {
	Name             *string `json:"name"`
	SoftwareRevision *string `json:"softwareRevision"`
	// DevicePublicKey is named only to be refused: the key is pinned by
	// the association and only a new one may bring another.
	DevicePublicKey json.RawMessage `json:"devicePublicKey"`
}

func (s *Server) updateMount(w http.ResponseWriter, r *http.Request, p core.Principal) {
	uid := r.PathValue("uid")
	if err := p.AuthorizeMount(core.ActionUpdateMount, uid); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	var body mountPatch
	if err := decodeJSON(r, &body); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	if body.DevicePublicKey != nil {
		writeError(w, r, s.Logger, &core.Error{Code: core.CodeValidation, Message: "the request is invalid",
			Fields: []core.FieldError{{Field: "devicePublicKey", Message: "cannot be changed: it is pinned by the association"}}})
		return
	}
	m, err := s.Mounts.UpdateMount(r.Context(), p, uid, core.MountUpdate{Name: body.Name, SoftwareRevision: body.SoftwareRevision})
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, []MountJSON{mountJSON(m)})
}

func (s *Server) deleteMount(w http.ResponseWriter, r *http.Request, p core.Principal) {
	if err := s.Mounts.DeleteMount(r.Context(), p, r.PathValue("uid")); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) abandonMount(w http.ResponseWriter, r *http.Request, p core.Principal) {
	if err := s.Mounts.AbandonMount(r.Context(), p, r.PathValue("uid")); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type stateEntryJSON struct {
	Code       *string `json:"code"`
	Value      *string `json:"value"`
	OccurredAt *string `json:"occurredAt"`
}

func (s *Server) reportStates(w http.ResponseWriter, r *http.Request, p core.Principal) {
	uid := r.PathValue("uid")
	if err := p.AuthorizeMount(core.ActionReportStates, uid); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	// The fields of the mount's signed states message, relayed unchanged
	// (docs/api.md, "Signed reports"); without a signature the others are
	// not looked at and the entries are stored unverified.
	var body struct {
		States           []json.RawMessage `json:"states"`
		Counter          *uint64           `json:"counter"`
		SoftwareRevision *string           `json:"softwareRevision"`
		Signature        *string           `json:"signature"`
	}
	if err := decodeJSON(r, &body); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	// The count is refused before any entry is looked at (docs/api.md).
	if err := core.CheckReportSize(len(body.States)); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	var v core.Validation
	if body.States == nil {
		v.Add("states", "is required")
	}
	var sig *core.ReportSignature
	if body.Signature != nil {
		sig = &core.ReportSignature{Signature: *body.Signature}
		if body.Counter == nil {
			v.Add("counter", "is required with a signature")
		} else {
			sig.Counter = *body.Counter
		}
		if body.SoftwareRevision != nil {
			sig.SoftwareRevision = *body.SoftwareRevision
		}
	}
	in := make([]core.StateInput, 0, len(body.States))
	for i, raw := range body.States {
		var e stateEntryJSON
		if err := decodeStateEntry(raw, &e); err != nil {
			for _, fe := range fieldErrors(err) {
				v.Add(fmt.Sprintf("states[%d]%s", i, prefixDot(fe.Field)), "%s", fe.Message)
			}
			continue
		}
		si := core.StateInput{}
		if e.Code != nil {
			si.Code = *e.Code
		}
		if e.Value != nil {
			si.Value = *e.Value
		} else {
			v.Add(fmt.Sprintf("states[%d].value", i), "is required")
		}
		if e.OccurredAt != nil {
			t, err := time.Parse(time.RFC3339Nano, *e.OccurredAt)
			if err != nil {
				v.Add(fmt.Sprintf("states[%d].occurredAt", i), "must be an RFC 3339 date-time")
				continue
			}
			si.OccurredAt, si.HasOccurredAt = t, true
		}
		in = append(in, si)
	}
	if err := v.Err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	res, err := s.Mounts.ReportStates(r.Context(), p, uid, in, sig)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// fieldErrors returns the fields a decoding error names, or one entry
// without a field.
func fieldErrors(err error) []core.FieldError {
	if ce, ok := err.(*core.Error); ok && len(ce.Fields) > 0 {
		return ce.Fields
	}
	return []core.FieldError{{Message: core.ErrorMessage(err)}}
}

func prefixDot(field string) string {
	if field == "" {
		return ""
	}
	return "." + field
}

type stateJSON struct {
	Code       string `json:"code"`
	Value      string `json:"value"`
	OccurredAt Time   `json:"occurredAt"`
	ReceivedAt Time   `json:"receivedAt"`
	// Verified says the entry came in a report the mount signed.
	Verified bool `json:"verified"`
}

func (s *Server) stateHistory(w http.ResponseWriter, r *http.Request, p core.Principal) {
	q := newQuery(r, "code", "from", "to", "currentPage", "pageSize")
	page := q.page(20)
	var f core.StateFilter
	if c := q.str("code"); c != nil {
		code := core.StateCode(*c) // core validates it
		f.Code = &code
	}
	f.From, f.To = q.time("from"), q.time("to")
	if err := q.err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	entries, pagination, err := s.Mounts.StateHistory(r.Context(), p, r.PathValue("uid"), f, page)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	out := make([]stateJSON, len(entries))
	for i, e := range entries {
		out[i] = toStateJSON(e)
	}
	writeJSON(w, http.StatusOK, map[string]any{"states": out, "pagination": pagination})
}

func (s *Server) queryCommand(w http.ResponseWriter, r *http.Request, p core.Principal) {
	values := r.URL.Query()
	params := core.CommandParams{}
	var v core.Validation
	for name, vals := range values {
		if name == "code" {
			continue
		}
		if len(vals) != 1 {
			v.Add(name, "must be given once")
			continue
		}
		params[name] = vals[0]
	}
	if err := v.Err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	cmds, err := s.Mounts.QueryCommand(r.Context(), p, r.PathValue("uid"), values.Get("code"), params)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, commandsJSON(cmds, false))
}

func (s *Server) commandAudit(w http.ResponseWriter, r *http.Request, p core.Principal) {
	q := newQuery(r, "currentPage", "pageSize")
	page := q.page(20)
	if err := q.err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	cmds, pagination, err := s.Mounts.CommandAudit(r.Context(), p, r.PathValue("uid"), page)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"commands": commandsJSON(cmds, true), "pagination": pagination})
}

func toStateJSON(e core.StateEntry) stateJSON {
	return stateJSON{Code: string(e.Code), Value: e.Value, OccurredAt: Time(e.OccurredAt), ReceivedAt: Time(e.ReceivedAt), Verified: e.Verified}
}

// getCommand answers GET /mounts/{uid}/commands/{id}: one Command object.
func (s *Server) getCommand(w http.ResponseWriter, r *http.Request, p core.Principal) {
	if err := newQuery(r).err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	c, err := s.Mounts.Command(r.Context(), p, r.PathValue("uid"), r.PathValue("id"))
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, commandJSON(c, p.Role == core.RoleOwner))
}

// receiptJSON is one receipt of an upload, the fields of the mount's
// result message unchanged; pointers tell a missing field from a zero one.
type receiptJSON struct {
	Nonce     *string `json:"nonce"`
	Outcome   *string `json:"outcome"`
	Reason    *string `json:"reason"`
	Counter   *uint64 `json:"counter"`
	At        *string `json:"at"`
	Signature *string `json:"signature"`
}

// uploadReceipts answers POST /mounts/{uid}/commands/receipts. The shape of
// every receipt is checked here, naming receipts[i].field; core decides the
// rest for the batch as a whole.
func (s *Server) uploadReceipts(w http.ResponseWriter, r *http.Request, p core.Principal) {
	uid := r.PathValue("uid")
	if err := p.AuthorizeMount(core.ActionReportStates, uid); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	var body struct {
		Receipts []json.RawMessage `json:"receipts"`
	}
	if err := decodeJSON(r, &body); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	if len(body.Receipts) > core.MaxReceiptsPerUpload {
		writeError(w, r, s.Logger, core.Errorf(core.CodePayloadTooLarge, "an upload holds at most %d receipts", core.MaxReceiptsPerUpload))
		return
	}
	in, err := receiptInputs(body.Receipts)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	res, err := s.Mounts.UploadReceipts(r.Context(), p, uid, in)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// receiptInputs checks the shape of each receipt: nonce and counter are
// required, at when given is RFC 3339 UTC with milliseconds (as the mount
// writes it). What the values say (an outcome missing or other than
// EXECUTED or REFUSED, a reason that does not fit it, a missing at) core
// judges after the mount, the nonces and the signatures, in the order
// docs/api.md gives.
func receiptInputs(raws []json.RawMessage) ([]core.ReceiptInput, error) {
	var v core.Validation
	if raws == nil {
		v.Add("receipts", "is required")
	}
	in := make([]core.ReceiptInput, 0, len(raws))
	for i, raw := range raws {
		field := func(name string) string { return fmt.Sprintf("receipts[%d]%s", i, prefixDot(name)) }
		var rj receiptJSON
		if t := skipSpace(raw, 0); t >= len(raw) || raw[t] != '{' {
			v.Add(field(""), "must be an object")
			continue
		}
		if err := decodeJSONBytes(raw, &rj); err != nil {
			for _, fe := range fieldErrors(err) {
				v.Add(field(fe.Field), "%s", fe.Message)
			}
			continue
		}
		var ri core.ReceiptInput
		if rj.Nonce == nil || *rj.Nonce == "" {
			v.Add(field("nonce"), "is required")
		} else {
			ri.Nonce = *rj.Nonce
		}
		// The outcome, and whether there is one, is core's to judge, with
		// the content after the signature (as is a missing at).
		if rj.Outcome != nil {
			ri.Outcome = *rj.Outcome
		}
		if rj.Reason != nil {
			ri.Reason = *rj.Reason
		}
		if rj.Counter == nil {
			v.Add(field("counter"), "is required")
		} else {
			ri.Counter = *rj.Counter
		}
		if rj.At != nil { // without it, zero: core names it with the content
			if at, err := time.Parse(protocol.TimeLayout, *rj.At); err != nil || !strings.HasSuffix(*rj.At, "Z") {
				v.Add(field("at"), "must be an RFC 3339 UTC date-time with milliseconds")
			} else {
				ri.At = at.UTC()
			}
		}
		if rj.Signature != nil {
			ri.Signature = *rj.Signature
		}
		in = append(in, ri)
	}
	return in, v.Err()
}
