package rest

import (
	"net/http"

	"github.com/mountd/mountd/core"
)

// BlobOpener opens the blobs behind signed local download links; nil when
// firmware lives in S3 and links are presigned there.
type BlobOpener interface {
	Open(urlPath, expires, signature string) (*core.OpenedBlob, error)
}

// FirmwareVersionJSON is a FirmwareVersion as the API shows it.
type FirmwareVersionJSON struct {
	SoftwareRevision string `json:"softwareRevision"`
	ModelNumber      string `json:"modelNumber"`
	AvailableSince   Time   `json:"availableSince"`
	Deprecated       bool   `json:"deprecated"`
	Mandatory        bool   `json:"mandatory"`
	SHA256           string `json:"sha256"`
	Size             int64  `json:"size"`
}

func firmwareJSON(v core.FirmwareVersion) FirmwareVersionJSON {
	return FirmwareVersionJSON{SoftwareRevision: v.SoftwareRevision, ModelNumber: v.ModelNumber,
		AvailableSince: Time(v.AvailableSince), Deprecated: v.Deprecated, Mandatory: v.Mandatory, SHA256: v.SHA256, Size: v.Size}
}

func (s *Server) listFirmware(w http.ResponseWriter, r *http.Request, p core.Principal) {
	q := newQuery(r, "currentPage", "pageSize", "modelNumber")
	page := q.page(10)
	model := q.str("modelNumber")
	if err := q.err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	list, pagination, err := s.Firmware.List(r.Context(), p, model, page)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	out := make([]FirmwareVersionJSON, len(list))
	for i, v := range list {
		out[i] = firmwareJSON(v)
	}
	writeJSON(w, http.StatusOK, map[string]any{"versions": out, "pagination": pagination})
}

func (s *Server) checkUpdate(w http.ResponseWriter, r *http.Request, p core.Principal) {
	q := newQuery(r, "modelNumber", "softwareRevision", "mountUid")
	model, rev, uid := q.str("modelNumber"), q.str("softwareRevision"), q.str("mountUid")
	if err := q.err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	var res core.UpdateCheck
	var err error
	if uid == nil {
		res, err = s.Firmware.CheckUpdate(r.Context(), p, deref(model), rev)
	} else {
		// The mount is read with the token's rights: one it cannot see
		// is MOUNT_NOT_FOUND, whatever the rollouts say.
		var m core.Mount
		if m, err = s.Mounts.Mount(r.Context(), p, *uid); err == nil {
			res, err = s.Firmware.CheckMountUpdate(r.Context(), p, deref(model), rev, m)
		}
	}
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	out := map[string]any{"code": res.Code}
	if res.Version != nil {
		out["version"] = firmwareJSON(*res.Version)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) downloadFirmware(w http.ResponseWriter, r *http.Request, p core.Principal) {
	q := newQuery(r, "modelNumber", "softwareRevision")
	model, rev := q.str("modelNumber"), q.str("softwareRevision")
	if err := q.err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	d, err := s.Firmware.Download(r.Context(), p, deref(model), rev)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"version": firmwareJSON(d.Version), "downloadLink": d.Link, "expiresAt": Time(d.ExpiresAt)})
}

// serveBlob streams a firmware file behind a signed link (no token), with
// Range and conditional requests through http.ServeContent.
func (s *Server) serveBlob(w http.ResponseWriter, r *http.Request) {
	if s.Blobs == nil {
		writeError(w, r, s.Logger, core.Errorf(core.CodeNotFound, "no such resource: %s", r.URL.Path))
		return
	}
	q := r.URL.Query()
	blob, err := s.Blobs.Open(r.URL.Path, q.Get("expires"), q.Get("signature"))
	if err != nil {
		if core.ErrorCode(err) == core.CodeFirmwareNotFound {
			// A valid link to a catalogued file that is not here: published
			// on another machine without shared storage, or deleted.
			s.Logger.ErrorContext(r.Context(), "a catalogued firmware file is missing from this replica's disk (is MOUNTD_BLOB_URL set on every replica and at firmware publish?)",
				"path", r.URL.Path)
		}
		writeError(w, r, s.Logger, err)
		return
	}
	defer blob.Close()
	w.Header().Set("ETag", blob.ETag)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", "private, max-age=60")
	http.ServeContent(w, r, "", blob.ModTime, blob)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
