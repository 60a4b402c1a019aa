package rest

import (
	"net/http"

	"github.com/mountd/mountd/core"
)

// NfcTagJSON is an NfcTag as the API shows it.
type NfcTagJSON struct {
	UID       string   `json:"uid"`
	Name      string   `json:"name"`
	Color     string   `json:"color"`
	IconName  string   `json:"iconName"`
	MountUIDs []string `json:"mountUids"`
	CreatedAt Time     `json:"createdAt"`
	UpdatedAt Time     `json:"updatedAt"`
}

func tagJSON(t core.NfcTag) NfcTagJSON {
	return NfcTagJSON{UID: t.UID, Name: t.Name, Color: t.Color, IconName: t.IconName, MountUIDs: t.MountUIDs,
		CreatedAt: Time(t.CreatedAt), UpdatedAt: Time(t.UpdatedAt)}
}

func (s *Server) listTags(w http.ResponseWriter, r *http.Request, p core.Principal) {
	q := newQuery(r, "currentPage", "pageSize")
	page := q.page(20)
	if err := q.err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	tags, pagination, err := s.Nfc.ListTags(r.Context(), p, page)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	out := make([]NfcTagJSON, len(tags))
	for i, t := range tags {
		out[i] = tagJSON(t)
	}
	writeJSON(w, http.StatusOK, map[string]any{"tags": out, "pagination": pagination})
}

type syncRequest struct {
	TagUIDs  *[]string `json:"tagUids"`
	MountUID *string   `json:"mountUid"`
}

func (s *Server) syncTags(w http.ResponseWriter, r *http.Request, p core.Principal) {
	// A token limited to some mounts learns 404 or 403 from the mount it
	// names (core decides); any other token is refused before the body.
	if !p.LimitedToMounts() {
		if err := p.Authorize(core.ActionWriteNfcTags); err != nil {
			writeError(w, r, s.Logger, err)
			return
		}
	}
	var body syncRequest
	if err := decodeJSON(r, &body); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	var v core.Validation
	if body.TagUIDs == nil {
		v.Add("tagUids", "is required")
	}
	if body.MountUID == nil {
		v.Add("mountUid", "is required")
	}
	if err := v.Err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	res, err := s.Nfc.SyncTags(r.Context(), p, *body.MountUID, *body.TagUIDs)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"message": "NFC tags synchronised", "mountUid": res.MountUID,
		"added": res.Added, "removed": res.Removed})
}

type tagPatch struct {
	Name     *string `json:"name"`
	Color    *string `json:"color"`
	IconName *string `json:"iconName"`
}

func (s *Server) updateTag(w http.ResponseWriter, r *http.Request, p core.Principal) {
	if err := p.Authorize(core.ActionWriteNfcTags); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	var body tagPatch
	if err := decodeJSON(r, &body); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	tag, err := s.Nfc.UpdateTag(r.Context(), p, r.PathValue("uid"), core.NfcTagUpdate{Name: body.Name, Color: body.Color, IconName: body.IconName})
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"message": "NFC tag updated", "tag": tagJSON(tag)})
}
