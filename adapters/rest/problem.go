package rest

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/internal/httpobs"
)

// statusByCode is the one table from core codes to HTTP statuses.
var statusByCode = map[core.Code]int{
	core.CodeValidation:            http.StatusBadRequest,
	core.CodeUnauthenticated:       http.StatusUnauthorized,
	core.CodeInsufficientScope:     http.StatusForbidden,
	core.CodeForbidden:             http.StatusForbidden,
	core.CodeNotFound:              http.StatusNotFound,
	core.CodeMountNotFound:         http.StatusNotFound,
	core.CodeNfcTagNotFound:        http.StatusNotFound,
	core.CodeFirmwareNotFound:      http.StatusNotFound,
	core.CodeMethodNotAllowed:      http.StatusMethodNotAllowed,
	core.CodeMountAlreadyOwned:     http.StatusConflict,
	core.CodeAssociationNotPending: http.StatusConflict,
	core.CodeMountNotAssociated:    http.StatusConflict,
	core.CodeConflict:              http.StatusConflict,
	core.CodeAssociationExpired:    http.StatusGone,
	core.CodeCursorExpired:         http.StatusGone,
	core.CodeWebhookNotFound:       http.StatusNotFound,
	core.CodeCommandNotFound:       http.StatusNotFound,
	core.CodeSignatureRequired:     http.StatusForbidden,
	core.CodeInvalidSignature:      http.StatusBadRequest,
	core.CodeAlarmRuleNotFound:     http.StatusNotFound,
	core.CodeAlarmNotFound:         http.StatusNotFound,
	core.CodeJobNotFound:           http.StatusNotFound,
	core.CodeRolloutNotFound:       http.StatusNotFound,
	core.CodeGrantNotFound:         http.StatusNotFound,
	core.CodeDeviceKeyRequired:     http.StatusConflict,
	core.CodePayloadTooLarge:       http.StatusRequestEntityTooLarge,
	core.CodeUnsupportedMedia:      http.StatusUnsupportedMediaType,
	core.CodeRateLimited:           http.StatusTooManyRequests,
	core.CodeRequestTimeout:        http.StatusRequestTimeout,
	core.CodeInternal:              http.StatusInternalServerError,
	core.CodeUnavailable:           http.StatusServiceUnavailable,
}

// Problem is an RFC 9457 problem document with the API's extensions.
type Problem struct {
	Type   string            `json:"type"`
	Title  string            `json:"title"`
	Status int               `json:"status"`
	Code   core.Code         `json:"code"`
	Detail string            `json:"detail,omitempty"`
	Errors []core.FieldError `json:"errors,omitempty"`
}

// ClientGone reports whether err is the end of r because its client went
// away (the server never cancels a request itself).
func ClientGone(r *http.Request, err error) bool {
	return r.Context().Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}

// writeError answers err as problem+json. Uncoded errors are logged here, once,
// and shown only as "internal error".
func writeError(w http.ResponseWriter, r *http.Request, logger *slog.Logger, err error) {
	var ce *core.Error
	var tooLarge *http.MaxBytesError
	if deadline := core.DeadlineError(r.Context()); deadline != nil {
		// The request's own deadline ended its work, whatever error the
		// interrupted statement gave.
		logger.WarnContext(r.Context(), "request deadline exceeded", "method", r.Method, "path", r.URL.Path, "err", err)
		err = deadline
	} else if ClientGone(r, err) {
		// Nobody reads the answer; the access log counts it as 499.
		logger.DebugContext(r.Context(), "client closed request", "method", r.Method, "path", r.URL.Path, "err", err)
		w.WriteHeader(httpobs.StatusClientClosedRequest)
		return
	}
	switch {
	case errors.As(err, &ce):
	case errors.As(err, &tooLarge):
		ce = core.Errorf(core.CodePayloadTooLarge, "the request body is larger than %d bytes", tooLarge.Limit)
	case core.IsUnavailable(err):
		logger.WarnContext(r.Context(), "dependency unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
		ce = &core.Error{Code: core.CodeUnavailable, Message: "a dependency is unavailable; retry shortly", RetryAfter: core.UnavailableRetry}
	default:
		logger.ErrorContext(r.Context(), "internal error", "method", r.Method, "path", r.URL.Path, "err", err)
		ce = core.Errorf(core.CodeInternal, "internal error")
	}
	status, ok := statusByCode[ce.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	switch status {
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="mountd"`)
	case http.StatusServiceUnavailable, http.StatusTooManyRequests:
		if ce.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(max(1, int((ce.RetryAfter+time.Second-1)/time.Second))))
		} else if w.Header().Get("Retry-After") == "" {
			w.Header().Set("Retry-After", "5")
		}
	}
	httpobs.SetCode(w, string(ce.Code))
	writeProblem(w, Problem{Type: "about:blank", Title: http.StatusText(status), Status: status,
		Code: ce.Code, Detail: ce.Message, Errors: ce.Fields})
}

func writeProblem(w http.ResponseWriter, p Problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// writeJSON answers v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
