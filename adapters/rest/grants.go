package rest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/protocol"
)

// Grants is what the API asks of offline access (CONTRACT §21).
type Grants interface {
	Create(ctx context.Context, p core.Principal, uid string, in core.GrantInput) (core.RiderGrant, error)
	Grant(ctx context.Context, p core.Principal, id string) (core.RiderGrant, error)
	List(ctx context.Context, p core.Principal, uid string, f core.GrantFilter, page core.Page) ([]core.RiderGrant, core.Pagination, error)
	Revoke(ctx context.Context, p core.Principal, id string) (core.RiderGrant, error)
	RevokeRider(ctx context.Context, p core.Principal, riderKey string) ([]core.RiderGrant, error)
	RevocationList(ctx context.Context, p core.Principal, uid string) (core.SignedText, error)
	UploadOfflineReceipts(ctx context.Context, p core.Principal, uid string, in []core.OfflineReceiptInput, status *core.MountOffline) (core.OfflineUpload, error)
	TimeToken(ctx context.Context, p core.Principal, uid, nonce string) (core.SignedText, error)
}

// GrantJSON is a rider grant as the API shows it. A token limited to its
// mounts sees no label.
type GrantJSON struct {
	ID         string   `json:"id"`
	UID        string   `json:"uid"`
	RiderKey   string   `json:"riderKey"`
	Rights     []string `json:"rights"`
	NotBefore  Time     `json:"notBefore"`
	NotAfter   Time     `json:"notAfter"`
	Epoch      int64    `json:"epoch"`
	Label      *string  `json:"label,omitempty"`
	CreatedAt  Time     `json:"createdAt"`
	RevokedAt  *Time    `json:"revokedAt"`
	Text       string   `json:"text"`
	Signature  string   `json:"signature"`
	Uses       int      `json:"uses"`
	LastUsedAt *Time    `json:"lastUsedAt"`
}

func grantJSON(p core.Principal, g core.RiderGrant) GrantJSON {
	out := GrantJSON{ID: g.ID, UID: g.UID, RiderKey: g.RiderKey, Rights: g.Rights, NotBefore: Time(g.NotBefore),
		NotAfter: Time(g.NotAfter), Epoch: g.Epoch, CreatedAt: Time(g.CreatedAt), Text: g.Text, Signature: g.Signature,
		Uses: g.Uses, RevokedAt: optionalTime(g.RevokedAt), LastUsedAt: optionalTime(g.LastUsedAt)}
	if !p.LimitedToMounts() {
		out.Label = &g.Label
	}
	return out
}

func optionalTime(t time.Time) *Time {
	if t.IsZero() {
		return nil
	}
	v := Time(t)
	return &v
}

func grantsJSON(p core.Principal, grants []core.RiderGrant) []GrantJSON {
	out := make([]GrantJSON, len(grants))
	for i, g := range grants {
		out[i] = grantJSON(p, g)
	}
	return out
}

type grantBody struct {
	RiderKey  *string   `json:"riderKey"`
	Rights    *[]string `json:"rights"`
	NotBefore *string   `json:"notBefore"`
	NotAfter  *string   `json:"notAfter"`
	Label     *string   `json:"label"`
}

func (b grantBody) input() (core.GrantInput, error) {
	in := core.GrantInput{RiderKey: deref(b.RiderKey), Rights: b.Rights, Label: b.Label}
	var v core.Validation
	for _, f := range []struct {
		name string
		raw  *string
		dst  **time.Time
	}{{"notBefore", b.NotBefore, &in.NotBefore}, {"notAfter", b.NotAfter, &in.NotAfter}} {
		if f.raw == nil {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, *f.raw)
		if err != nil {
			v.Add(f.name, "must be an RFC 3339 date-time")
			continue
		}
		t = t.UTC()
		*f.dst = &t
	}
	return in, v.Err()
}

func (s *Server) createGrant(w http.ResponseWriter, r *http.Request, p core.Principal) {
	if err := p.AuthorizeMount(core.ActionCreateGrant, r.PathValue("uid")); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	var body grantBody
	if err := decodeJSON(r, &body); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	in, err := body.input()
	if err == nil {
		var g core.RiderGrant
		if g, err = s.Grants.Create(r.Context(), p, r.PathValue("uid"), in); err == nil {
			writeJSON(w, http.StatusCreated, grantJSON(p, g))
			return
		}
	}
	writeError(w, r, s.Logger, err)
}

// listGrants serves a mount's grants and, without uid, the account's
// grants of one rider.
func (s *Server) listGrants(w http.ResponseWriter, r *http.Request, p core.Principal) {
	q := newQuery(r, "currentPage", "pageSize", "state", "riderKey")
	page := q.page(20)
	f := core.GrantFilter{RiderKey: q.str("riderKey")}
	if st := q.str("state"); st != nil {
		state := core.GrantState(*st)
		f.State = &state
	}
	if err := q.err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	grants, pagination, err := s.Grants.List(r.Context(), p, r.PathValue("uid"), f, page)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"grants": grantsJSON(p, grants), "pagination": pagination})
}

func (s *Server) getGrant(w http.ResponseWriter, r *http.Request, p core.Principal) {
	g, err := s.Grants.Grant(r.Context(), p, r.PathValue("id"))
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, grantJSON(p, g))
}

func (s *Server) revokeGrant(w http.ResponseWriter, r *http.Request, p core.Principal) {
	g, err := s.Grants.Revoke(r.Context(), p, r.PathValue("id"))
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, grantJSON(p, g))
}

func (s *Server) revokeRider(w http.ResponseWriter, r *http.Request, p core.Principal) {
	if err := p.Authorize(core.ActionManageGrants); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	var body struct {
		RiderKey *string `json:"riderKey"`
	}
	if err := decodeJSON(r, &body); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	grants, err := s.Grants.RevokeRider(r.Context(), p, deref(body.RiderKey))
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"grants": grantsJSON(p, grants)})
}

// SignedTextJSON is a text a mount checks and its signature.
type SignedTextJSON struct {
	Text      string `json:"text"`
	Signature string `json:"signature"`
}

func (s *Server) revocationList(w http.ResponseWriter, r *http.Request, p core.Principal) {
	q := newQuery(r)
	if err := q.err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	list, err := s.Grants.RevocationList(r.Context(), p, r.PathValue("uid"))
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, SignedTextJSON(list))
}

func (s *Server) timeToken(w http.ResponseWriter, r *http.Request, p core.Principal) {
	q := newQuery(r, "nonce")
	nonce := q.str("nonce")
	if err := q.err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	tok, err := s.Grants.TimeToken(r.Context(), p, r.PathValue("uid"), deref(nonce))
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, SignedTextJSON(tok))
}

// OfflineUploadJSON answers POST /mounts/{uid}/offline-receipts.
type OfflineUploadJSON struct {
	Accepted   int             `json:"accepted"`
	Duplicates int             `json:"duplicates"`
	Rejected   []rejectedJSON  `json:"rejected"`
	Ack        *SignedTextJSON `json:"ack"`
}

type rejectedJSON struct {
	Nonce  string `json:"nonce"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

func (s *Server) uploadOfflineReceipts(w http.ResponseWriter, r *http.Request, p core.Principal) {
	uid := r.PathValue("uid")
	if err := p.AuthorizeMount(core.ActionReportStates, uid); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	var body struct {
		Receipts []json.RawMessage `json:"receipts"`
		// Status is what the mount's info said: Mount.offline.
		Status json.RawMessage `json:"status"`
	}
	if err := decodeJSON(r, &body); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	if body.Receipts == nil {
		writeError(w, r, s.Logger, fieldError("receipts", "is required"))
		return
	}
	if len(body.Receipts) > core.MaxOfflineReceiptsPerUpload {
		writeError(w, r, s.Logger, core.Errorf(core.CodePayloadTooLarge, "an upload holds at most %d receipts", core.MaxOfflineReceiptsPerUpload))
		return
	}
	in := make([]core.OfflineReceiptInput, len(body.Receipts))
	for i, raw := range body.Receipts {
		// Read one by one: a receipt that does not parse is rejected
		// alone, the others judged.
		var b protocol.UploadOfflineReceipt
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&b); err != nil {
			in[i] = core.OfflineReceiptInput{ReceiptInput: core.ReceiptInput{Nonce: b.Nonce}, Unreadable: "not a receipt: " + err.Error()}
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, b.At)
		if err != nil {
			in[i] = core.OfflineReceiptInput{ReceiptInput: core.ReceiptInput{Nonce: b.Nonce}, Unreadable: "at must be an RFC 3339 date-time"}
			continue
		}
		in[i] = core.OfflineReceiptInput{GrantID: b.GrantID, Code: b.Code, ReceiptInput: core.ReceiptInput{Nonce: b.Nonce,
			Outcome: b.Outcome, Reason: b.Reason, Counter: b.Counter, At: at.UTC(), Signature: b.Signature}}
	}
	status, err := offlineStatus(body.Status)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	res, err := s.Grants.UploadOfflineReceipts(r.Context(), p, uid, in, status)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	out := OfflineUploadJSON{Accepted: res.Accepted, Duplicates: res.Duplicates, Rejected: make([]rejectedJSON, len(res.Rejected))}
	for i, rej := range res.Rejected {
		out.Rejected[i] = rejectedJSON{Nonce: rej.Nonce, Code: string(rej.Code), Detail: rej.Detail}
	}
	if res.Ack != nil {
		ack := SignedTextJSON(*res.Ack)
		out.Ack = &ack
	}
	writeJSON(w, http.StatusOK, out)
}

// offlineStatus reads an upload's optional status (absent or null: none).
func offlineStatus(raw json.RawMessage) (*core.MountOffline, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var st struct {
		RevocationVersion *int64 `json:"revocationVersion"`
		LogPending        *int   `json:"logPending"`
		TimeTrusted       *bool  `json:"timeTrusted"`
	}
	if err := decodeJSONBytes(raw, &st); err != nil {
		return nil, fieldError("status", "must be {\"revocationVersion\",\"logPending\",\"timeTrusted\"}: "+core.ErrorMessage(err))
	}
	if st.RevocationVersion == nil || st.LogPending == nil || st.TimeTrusted == nil {
		return nil, fieldError("status", "needs revocationVersion, logPending and timeTrusted")
	}
	return &core.MountOffline{RevocationVersion: *st.RevocationVersion, LogPending: *st.LogPending, TimeTrusted: *st.TimeTrusted}, nil
}
