// Package rest is the REST transport of mountd: the API of the
// specification under /api/v1/, and the health endpoints. It holds no
// business rule: handlers decode, call core, and encode. Putting it on a
// listener beside GraphQL and the identity provider is app's listener
// work.
package rest

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/internal/dbread"
	"github.com/mountd/mountd/internal/httpobs"
)

// Checker is a dependency that readiness depends on.
type Checker struct {
	Name  string
	Check func(ctx context.Context) error
	// Optional marks a dependency mountd serves without, more slowly or
	// less precisely (Redis): its failure shows as "degraded" and the
	// replica stays ready, so that a load balancer does not drain every
	// replica at once for it.
	Optional bool
}

// Deps is what the REST transport needs.
type Deps struct {
	Logger   *slog.Logger
	Verifier core.TokenVerifier
	Accounts Accounts
	Mounts   Mounts
	Nfc      NfcTags
	Firmware Firmware
	Events   Events
	Webhooks Webhooks
	Exports  Exports
	Audit    Audit
	Alarms   Alarms
	Jobs     Jobs
	Rollouts Rollouts
	Grants   Grants
	// Blobs serves local firmware files; nil with S3 storage.
	Blobs  BlobOpener
	Checks []Checker
	// RateLimit is the per-account API rate limit; nil: none.
	RateLimit *core.APIRateLimit
	// Cursors makes the event log's positions into cursors and back.
	Cursors *core.CursorCodec
	// ExportWriteTimeout cuts an export whose client reads nothing.
	ExportWriteTimeout ExportWriteTimeout
	// Reads sends a client's reads to read replicas or, after its writes,
	// to the primary; nil without replicas.
	Reads *dbread.Policy
}

// Server is the REST API's handler tree.
type Server struct {
	Deps
	handler http.Handler
}

// NewServer builds the handler tree.
func NewServer(d Deps) *Server {
	s := &Server{Deps: d}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)

	api := http.NewServeMux()
	api.Handle("GET /api/v1/accounts/me", s.authed(s.me))
	api.Handle("GET /api/v1/openapi.json", http.HandlerFunc(s.openAPI))
	api.Handle("GET /api/v1/mounts", s.authed(s.listMounts))
	api.Handle("POST /api/v1/mounts", s.authed(s.requestAssociation))
	api.Handle("POST /api/v1/mounts/{uid}/confirm-association", s.authed(s.confirmAssociation))
	api.Handle("GET /api/v1/mounts/{uid}", s.authed(s.getMount))
	api.Handle("PATCH /api/v1/mounts/{uid}", s.authed(s.updateMount))
	api.Handle("DELETE /api/v1/mounts/{uid}", s.authed(s.deleteMount))
	api.Handle("POST /api/v1/mounts/{uid}/states", s.authed(s.reportStates))
	api.Handle("GET /api/v1/mounts/{uid}/states", s.authed(s.stateHistory))
	api.Handle("GET /api/v1/mounts/{uid}/query", s.authed(s.queryCommand))
	api.Handle("GET /api/v1/mounts/{uid}/commands", s.authed(s.commandAudit))
	api.Handle("GET /api/v1/mounts/{uid}/pending-commands", s.authed(s.pendingCommands))
	api.Handle("GET /api/v1/mounts/{uid}/commands/{id}", s.authed(s.getCommand))
	api.Handle("POST /api/v1/mounts/{uid}/commands/receipts", s.authed(s.uploadReceipts))
	api.Handle("DELETE /api/v1/mounts/{uid}/abandon", s.authed(s.abandonMount))
	api.Handle("GET /api/v1/nfc-tags", s.authed(s.listTags))
	api.Handle("POST /api/v1/nfc-tags", s.authed(s.syncTags))
	api.Handle("PATCH /api/v1/nfc-tags/{uid}", s.authed(s.updateTag))
	api.Handle("GET /api/v1/firmware/versions", s.authed(s.listFirmware))
	api.Handle("GET /api/v1/firmware/check-update", s.authed(s.checkUpdate))
	api.Handle("GET /api/v1/firmware/download", s.authed(s.downloadFirmware))
	api.Handle("GET /api/v1/firmware/blobs/{key...}", http.HandlerFunc(s.serveBlob))
	api.Handle("GET /api/v1/events", s.authed(s.listEvents))
	api.Handle("POST /api/v1/webhooks", s.authed(s.createWebhook))
	api.Handle("GET /api/v1/webhooks", s.authed(s.listWebhooks))
	api.Handle("GET /api/v1/webhooks/{id}", s.authed(s.getWebhook))
	api.Handle("PATCH /api/v1/webhooks/{id}", s.authed(s.updateWebhook))
	api.Handle("DELETE /api/v1/webhooks/{id}", s.authed(s.deleteWebhook))
	api.Handle("POST /api/v1/webhooks/{id}/rotate-secret", s.authed(s.rotateWebhookSecret))
	api.Handle("POST /api/v1/webhooks/{id}/test", s.authed(s.testWebhook))
	api.Handle("GET /api/v1/webhooks/{id}/deliveries", s.authed(s.webhookDeliveries))
	api.Handle("POST /api/v1/alarm-rules", s.authed(s.createAlarmRule))
	alarms, manageRules := func() Alarms { return s.Alarms }, core.ActionManageAlarmRules
	api.Handle("GET /api/v1/alarm-rules", s.authed(paged(s, manageRules, alarms, "rules", withoutID(Alarms.ListRules), alarmRuleJSON)))
	api.Handle("GET /api/v1/alarm-rules/suggested", s.authed(s.suggestedAlarmRules))
	api.Handle("GET /api/v1/alarm-rules/{id}", s.authed(byID(s, manageRules, alarms, Alarms.Rule, alarmRuleJSON)))
	api.Handle("PATCH /api/v1/alarm-rules/{id}", s.authed(s.updateAlarmRule))
	api.Handle("DELETE /api/v1/alarm-rules/{id}", s.authed(s.deleteAlarmRule))
	api.Handle("GET /api/v1/alarms", s.authed(s.listAlarms))
	api.Handle("POST /api/v1/alarms/{id}/acknowledge", s.authed(s.acknowledgeAlarm))
	api.Handle("POST /api/v1/jobs", s.authed(s.createJob))
	jobs, manageJobs := func() Jobs { return s.Jobs }, core.ActionManageJobs
	api.Handle("GET /api/v1/jobs", s.authed(paged(s, manageJobs, jobs, "jobs", withoutID(Jobs.ListJobs), jobJSON)))
	api.Handle("GET /api/v1/jobs/{id}", s.authed(byID(s, manageJobs, jobs, Jobs.Job, jobJSON)))
	api.Handle("GET /api/v1/jobs/{id}/mounts", s.authed(paged(s, manageJobs, jobs, "mounts", Jobs.JobMounts, jobTargetJSON)))
	api.Handle("POST /api/v1/jobs/{id}/cancel", s.authed(byID(s, manageJobs, jobs, Jobs.CancelJob, jobJSON)))
	rollouts, manageRollouts := func() Rollouts { return s.Rollouts }, core.ActionManageRollouts
	api.Handle("POST /api/v1/rollouts", s.authed(s.createRollout))
	api.Handle("GET /api/v1/rollouts", s.authed(paged(s, manageRollouts, rollouts, "rollouts", withoutID(Rollouts.ListRollouts), rolloutJSON)))
	api.Handle("GET /api/v1/rollouts/{id}", s.authed(byID(s, manageRollouts, rollouts, Rollouts.Rollout, rolloutJSON)))
	api.Handle("GET /api/v1/rollouts/{id}/mounts", s.authed(paged(s, manageRollouts, rollouts, "mounts", Rollouts.RolloutMounts, rolloutTargetJSON)))
	api.Handle("POST /api/v1/rollouts/{id}/pause", s.authed(byID(s, manageRollouts, rollouts, Rollouts.PauseRollout, rolloutJSON)))
	api.Handle("POST /api/v1/rollouts/{id}/resume", s.authed(byID(s, manageRollouts, rollouts, Rollouts.ResumeRollout, rolloutJSON)))
	api.Handle("POST /api/v1/rollouts/{id}/cancel", s.authed(byID(s, manageRollouts, rollouts, Rollouts.CancelRollout, rolloutJSON)))
	api.Handle("POST /api/v1/mounts/{uid}/grants", s.authed(s.createGrant))
	api.Handle("GET /api/v1/mounts/{uid}/grants", s.authed(s.listGrants))
	api.Handle("GET /api/v1/mounts/{uid}/time", s.authed(s.timeToken))
	api.Handle("GET /api/v1/mounts/{uid}/revocations", s.authed(s.revocationList))
	api.Handle("POST /api/v1/mounts/{uid}/offline-receipts", s.authed(s.uploadOfflineReceipts))
	api.Handle("GET /api/v1/grants", s.authed(s.listGrants))
	api.Handle("POST /api/v1/grants/revoke", s.authed(s.revokeRider))
	api.Handle("GET /api/v1/grants/{id}", s.authed(s.getGrant))
	api.Handle("POST /api/v1/grants/{id}/revoke", s.authed(s.revokeGrant))
	api.Handle("GET /api/v1/audit", s.authed(s.listAudit))
	api.Handle("GET /api/v1/exports/mounts", s.authed(s.exportMounts))
	api.Handle("GET /api/v1/exports/states", s.authed(s.exportStates))
	Fallback(api, "/api/v1/", d.Logger)
	mux.Handle("/api/v1/", LimitBody(api))
	Fallback(mux, "/", d.Logger)

	s.handler = mux
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Handler and Paths let a listener mount the API beside other handlers.
func (s *Server) Handler() http.Handler { return s }

// Paths are the patterns the API answers on a shared listener.
func (s *Server) Paths() []string {
	return []string{"GET /healthz", "GET /readyz", "/api/v1/"}
}

// LimitBody caps request bodies at the API's 1 MiB. A declared length over
// the limit is refused before anything is read. Unlike http.MaxBytesHandler
// it keeps the request itself, so that the route a mux below matches is
// seen by the access log above.
func LimitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		next.ServeHTTP(w, r)
	})
}

// InternalError answers a request whose handler failed unexpectedly with a
// 500 problem that says nothing of the internals.
func (s *Server) InternalError(w http.ResponseWriter, r *http.Request) {
	writeError(w, r, s.Logger, core.Errorf(core.CodeInternal, "internal error"))
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	checks := map[string]string{}
	status := "ok"
	for _, c := range s.Checks {
		err := c.Check(ctx)
		switch {
		case err == nil:
			checks[c.Name] = "ok"
		case c.Optional:
			s.Logger.WarnContext(ctx, "readiness check failed; serving degraded", "check", c.Name, "err", err)
			checks[c.Name] = "degraded"
			if status == "ok" {
				status = "degraded"
			}
		default:
			s.Logger.WarnContext(ctx, "readiness check failed", "check", c.Name, "err", err)
			checks[c.Name] = "unavailable"
			status = "unavailable"
		}
	}
	if status == "unavailable" {
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": status, "checks": checks})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": status, "checks": checks})
}

// authed verifies the access token before h runs. Authentication comes
// before any look at the body (docs/api.md), and a token lacking mandatory
// scope items is refused here for every API call.
func (s *Server) authed(h func(http.ResponseWriter, *http.Request, core.Principal)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw := bearerToken(r)
		if raw == "" {
			writeError(w, r, s.Logger, core.Errorf(core.CodeUnauthenticated, "an access token is required in the Access-Key header"))
			return
		}
		p, err := s.Verifier.Verify(r.Context(), raw)
		if err != nil {
			writeError(w, r, s.Logger, err)
			return
		}
		if !p.Complete {
			writeError(w, r, s.Logger, p.Authorize(core.ActionReadAccount))
			return
		}
		httpobs.SetAccount(w, p.AccountID)
		if s.RateLimit != nil {
			d, err := s.RateLimit.Take(r.Context(), p)
			setRateHeaders(w.Header(), d)
			if err != nil {
				writeError(w, r, s.Logger, err)
				return
			}
		}
		// The caller's address goes with the principal: a change records
		// it in the audit log.
		ctx := core.WithSource(core.WithPrincipal(r.Context(), p), httpobs.SourceAddress(r))
		ctx = s.routeReads(ctx, r, p)
		h(w, r.WithContext(ctx), p)
	})
}

// replicaRoutes are the API's reads that may be served by a read replica
// (CONTRACT §22): lists, filters, counts, exports and one mount. The event
// log and the audit read the primary, so that their cursors stay exact.
var replicaRoutes = map[string]bool{
	"GET /api/v1/mounts":                   true,
	"GET /api/v1/mounts/{uid}":             true,
	"GET /api/v1/mounts/{uid}/states":      true,
	"GET /api/v1/mounts/{uid}/commands":    true,
	"GET /api/v1/nfc-tags":                 true,
	"GET /api/v1/firmware/versions":        true,
	"GET /api/v1/webhooks":                 true,
	"GET /api/v1/webhooks/{id}/deliveries": true,
	"GET /api/v1/alarm-rules":              true,
	"GET /api/v1/alarms":                   true,
	"GET /api/v1/jobs":                     true,
	"GET /api/v1/jobs/{id}":                true,
	"GET /api/v1/jobs/{id}/mounts":         true,
	"GET /api/v1/rollouts":                 true,
	"GET /api/v1/rollouts/{id}":            true,
	"GET /api/v1/rollouts/{id}/mounts":     true,
	"GET /api/v1/exports/mounts":           true,
	"GET /api/v1/exports/states":           true,
	"GET /api/v1/mounts/{uid}/grants":      true,
	"GET /api/v1/grants":                   true,
	"GET /api/v1/grants/{id}":              true,
}

// writingGETs are the reads that sign and store commands.
var writingGETs = map[string]bool{
	"GET /api/v1/mounts/{uid}/query":            true,
	"GET /api/v1/mounts/{uid}/pending-commands": true,
}

// routeReads marks a replica read, or pins the client to the primary
// before a request that may write. GraphQL decides per operation (graph).
func (s *Server) routeReads(ctx context.Context, r *http.Request, p core.Principal) context.Context {
	if s.Reads == nil {
		return ctx
	}
	switch {
	case replicaRoutes[r.Pattern]:
		return s.Reads.Read(ctx, p.TokenID)
	case r.Pattern == GraphQLPattern:
		return ctx
	case r.Method != http.MethodGet && r.Method != http.MethodHead, writingGETs[r.Pattern]:
		s.Reads.Write(ctx, p.TokenID)
	}
	return ctx
}

// GraphQLPattern is the route the listener serves GraphQL at.
const GraphQLPattern = "/graphql"

// RequireToken authenticates GraphQL over HTTP like the API (401 and 403
// as problem+json); a WebSocket upgrade authenticates in connection_init.
func (s *Server) RequireToken(next http.Handler) http.Handler {
	authed := s.authed(func(w http.ResponseWriter, r *http.Request, _ core.Principal) { next.ServeHTTP(w, r) })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			next.ServeHTTP(w, r.WithContext(core.WithSource(r.Context(), httpobs.SourceAddress(r))))
			return
		}
		authed.ServeHTTP(w, r)
	})
}

// setRateHeaders tells the client where its account stands: the limit, the
// requests left and the seconds until the whole limit is free again.
// The keys are written in canonical form, which spares canonicalizing them
// on every request.
func setRateHeaders(h http.Header, d core.RateDecision) {
	h["X-Ratelimit-Limit"] = []string{strconv.Itoa(d.Limit)}
	if d.Remaining >= 0 {
		h["X-Ratelimit-Remaining"] = []string{strconv.Itoa(d.Remaining)}
		h["X-Ratelimit-Reset"] = []string{strconv.Itoa(int((d.ResetAfter + time.Second - 1) / time.Second))}
	}
}

// bearerToken reads the Access-Key header, or an Authorization Bearer token.
func bearerToken(r *http.Request) string {
	if v := strings.TrimSpace(r.Header.Get("Access-Key")); v != "" {
		return v
	}
	auth := r.Header.Get("Authorization")
	if len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
		return strings.TrimSpace(auth[7:])
	}
	return ""
}

// MeResponse is the body of GET /api/v1/accounts/me.
type MeResponse struct {
	AccountID string   `json:"accountId"`
	Name      string   `json:"name"`
	Role      string   `json:"role"`
	MountUIDs []string `json:"mountUids"`
	Scopes    []string `json:"scopes"`
	ExpiresAt Time     `json:"expiresAt"`
}

func (s *Server) me(w http.ResponseWriter, r *http.Request, p core.Principal) {
	me, err := s.Accounts.Me(r.Context(), p)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, MeResponse{AccountID: me.AccountID, Name: me.Name, Role: string(me.Role),
		MountUIDs: me.MountUIDs, Scopes: me.Scopes, ExpiresAt: Time(me.ExpiresAt)})
}
