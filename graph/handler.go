package graph

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/graph/generated"
	"github.com/mountd/mountd/graph/wsproto"
	"github.com/mountd/mountd/internal/dbread"
	"github.com/mountd/mountd/internal/telemetry"
)

// Options tune the GraphQL endpoint.
type Options struct {
	Introspection   bool
	ComplexityLimit int
	DepthLimit      int
	// PublicURL is the address people reach mountd at (MOUNTD_PUBLIC_URL):
	// a browser page of its origin may open a WebSocket whatever Host a
	// proxy passes on.
	PublicURL string
	// OriginPatterns are further origins allowed to open a WebSocket from a
	// browser (github.com/coder/websocket patterns); same-origin is always allowed.
	OriginPatterns []string
	KeepAlive      time.Duration
	// WebSocketStats, when set, is kept up to date for metrics.
	WebSocketStats *wsproto.Stats
	// RateLimit, when set, counts each WebSocket's connection_init, and
	// each operation started on a socket, as one request of the account
	// (HTTP requests are counted in rest).
	RateLimit *core.APIRateLimit
	// MaxResponseBytes bounds one answer (one result of a subscription);
	// zero: DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// Reads, when set, lets queries read replicas and pins a client to
	// the primary after its mutations.
	Reads *dbread.Policy
}

// DefaultMaxResponseBytes is the answer size limit of `mountd serve`.
const DefaultMaxResponseBytes = 32 << 20

// DefaultOptions are what `mountd serve` uses. The complexity limit admits
// the largest page of each list with every nested field (a page of 1,000
// events costs about 2,900,000 under the cost model of limits.go), not two.
var DefaultOptions = Options{Introspection: true, ComplexityLimit: 3_000_000, DepthLimit: 10, KeepAlive: 10 * time.Second}

// NewHandler returns the /graphql endpoint: POST and GET queries, and
// subscriptions over WebSocket (graphql-transport-ws, and legacy graphql-ws).
// HTTP requests arrive authenticated (rest puts the principal in the
// context); a WebSocket authenticates in its connection_init payload.
func NewHandler(r *Resolver, verifier core.TokenVerifier, opts Options) http.Handler {
	srv := handler.New(newExecutableSchema(r))
	// gqlgen's transport behind wsproto, which adds the graphql-transport-ws
	// rules gqlgen lacks (close codes 4400, 4401, 4403, 4408, 4409, 4429,
	// error messages for refused operations); see graph/wsproto.
	share := wsproto.NewSharing(r.shareKey)
	if opts.WebSocketStats != nil {
		opts.WebSocketStats.Observe(share)
	}
	srv.AddTransport(wsproto.Transport{Share: share, Stats: opts.WebSocketStats, Websocket: transport.Websocket{
		// Cross-origin browser upgrades are refused unless allowed here.
		Implementation: transport.CoderWebsocketImplementation{AcceptOptions: acceptOptions(opts.PublicURL, opts.OriginPatterns)},
		InitFunc:       websocketInit(verifier, newSocketCounter(MaxSocketsPerToken), opts.RateLimit),
		InitTimeout:    3 * time.Second, // then 4408
		// graphql-ws (legacy) keep-alive, and graphql-transport-ws pings.
		KeepAlivePingInterval: opts.KeepAlive,
		PingPongInterval:      opts.KeepAlive,
	}})
	srv.AddTransport(transport.Options{})
	srv.AddTransport(transport.GET{})
	srv.AddTransport(transport.POST{})
	queries := lru.New[*ast.QueryDocument](1000)
	srv.SetQueryCache(queries)
	srv.SetParserTokenLimit(MaxQueryTokens)
	if opts.RateLimit != nil {
		// First, so that every operation counts, refused ones included.
		srv.Use(socketRateLimit{limit: opts.RateLimit})
	}
	srv.Use(documentLimiter{parsed: queries})
	if opts.Introspection {
		srv.Use(extension.Introspection{})
	}
	srv.Use(extension.FixedComplexityLimit(opts.ComplexityLimit))
	maxAnswer := opts.MaxResponseBytes
	if maxAnswer <= 0 {
		maxAnswer = DefaultMaxResponseBytes
	}
	srv.Use(answerLimit{max: maxAnswer})
	srv.Use(depthLimit(opts.DepthLimit))
	if telemetry.Enabled() {
		srv.Use(newOperationTracing())
	}
	srv.AroundOperations(deadlineAnswer)
	if opts.Reads != nil {
		srv.AroundOperations(routeReads(opts.Reads))
	}
	srv.SetErrorPresenter(errorPresenter(r.Logger))
	srv.SetRecoverFunc(func(ctx context.Context, v any) error {
		r.Logger.ErrorContext(ctx, "panic in resolver", "panic", v)
		return errors.New("internal error")
	})
	return r.WithLoaders(srv)
}

// newExecutableSchema is the schema with r's resolvers and the cost model
// of limits.go.
func newExecutableSchema(r *Resolver) graphql.ExecutableSchema {
	return generated.NewExecutableSchema(generated.Config{Resolvers: r, Complexity: complexityRoot()})
}

// errorPresenter gives every error the REST code in extensions.code; an
// uncoded error is logged and shown only as "internal error".
func errorPresenter(logger *slog.Logger) graphql.ErrorPresenterFunc {
	return func(ctx context.Context, err error) *gqlerror.Error {
		gqlErr := graphql.DefaultErrorPresenter(ctx, err)
		var ce *core.Error
		if errors.As(err, &ce) {
			gqlErr.Message = ce.Message
			if gqlErr.Extensions == nil {
				gqlErr.Extensions = map[string]any{}
			}
			gqlErr.Extensions["code"] = string(ce.Code)
			if len(ce.Fields) > 0 {
				gqlErr.Extensions["errors"] = ce.Fields
			}
			if ce.RetryAfter > 0 { // seconds, as REST's Retry-After
				gqlErr.Extensions["retryAfter"] = int((ce.RetryAfter + time.Second - 1) / time.Second)
			}
			return gqlErr
		}
		var existing *gqlerror.Error
		if errors.As(err, &existing) && existing.Extensions["code"] != nil {
			return gqlErr // parse and validation errors carry gqlgen's codes
		}
		if errors.As(err, &existing) && len(existing.Path) == 0 {
			// A request-level error: the body or parameters could not be
			// read (not JSON, a JSON array, bad variables). gqlgen quotes the
			// whole body in the message, secrets in variables included:
			// keep a bounded reason only, in the answer and in the log.
			reason := existing.Message
			if i := strings.Index(reason, " body:"); i >= 0 {
				reason = reason[:i]
			}
			if len(reason) > 200 {
				reason = reason[:200] + "…"
			}
			logger.InfoContext(ctx, "GraphQL request refused", "reason", reason)
			gqlErr.Message = reason
			gqlErr.Extensions = map[string]any{"code": "BAD_REQUEST"}
			return gqlErr
		}
		if deadline := core.DeadlineError(ctx); deadline != nil {
			// The request's own deadline ended the field's work.
			logger.WarnContext(ctx, "GraphQL request deadline exceeded", "err", err)
			gqlErr.Message = core.ErrRequestDeadline.Message
			gqlErr.Extensions = unavailableExtensions()
			return gqlErr
		}
		if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
			// The operation ended before the field did (its client left,
			// its answer grew too large): nobody reads this, and it is no
			// fault of mountd's.
			logger.DebugContext(ctx, "GraphQL field cancelled", "err", err)
			gqlErr.Message = "the operation was cancelled"
			gqlErr.Extensions = map[string]any{"code": "CANCELLED"}
			return gqlErr
		}
		if core.IsUnavailable(err) {
			logger.WarnContext(ctx, "dependency unavailable in GraphQL", "err", err)
			gqlErr.Message = "a dependency is unavailable; retry shortly"
			gqlErr.Extensions = unavailableExtensions()
			return gqlErr
		}
		logger.ErrorContext(ctx, "internal error in GraphQL", "err", err)
		gqlErr.Message = "internal error"
		gqlErr.Extensions = map[string]any{"code": string(core.CodeInternal)}
		return gqlErr
	}
}

// websocketInit authenticates a WebSocket from its connection_init payload:
// {"Access-Key": "..."} or {"Authorization": "Bearer ..."}. A missing, bad or
// expired token, or one lacking a mandatory scope item, closes the socket
// with 4403 Forbidden; the socket closes with 4403 too when the token
// expires. The ack carries no payload, so the token is never echoed.
func websocketInit(verifier core.TokenVerifier, sockets *socketCounter, rateLimit *core.APIRateLimit) transport.WebsocketInitFunc {
	return func(ctx context.Context, payload transport.InitPayload) (context.Context, *transport.InitPayload, error) {
		raw := payload.GetString("Access-Key")
		if raw == "" {
			raw = payload.GetString("access-key")
		}
		if raw == "" {
			auth := payload.Authorization()
			if len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
				raw = strings.TrimSpace(auth[7:])
			}
		}
		if raw == "" {
			return wsproto.Reject(ctx), nil, errors.New("an access token is required in the connection_init payload")
		}
		p, err := verifier.Verify(ctx, raw)
		if err != nil {
			return wsproto.Reject(ctx), nil, errors.New(core.ErrorMessage(err))
		}
		if !p.Complete {
			return wsproto.Reject(ctx), nil, errors.New("the token lacks a mandatory scope item and grants no rights")
		}
		if rateLimit != nil {
			// A refused socket closes with 4429, the protocol's code for
			// too many requests, with the wait in the reason.
			if _, err := rateLimit.Take(ctx, p); err != nil {
				wait := time.Second
				if ce := (*core.Error)(nil); errors.As(err, &ce) && ce.RetryAfter > wait {
					wait = ce.RetryAfter
				}
				return ctx, nil, &wsproto.CloseError{Code: wsproto.CloseTooManyInitRequests,
					Reason: fmt.Sprintf("Rate limited: the account's API rate limit is used up; retry in %d s", int((wait+time.Second-1)/time.Second))}
			}
		}
		release, ok := sockets.acquire(raw)
		if !ok {
			return ctx, nil, &wsproto.CloseError{Code: wsproto.CloseTooManyInitRequests,
				Reason: fmt.Sprintf("Too many connections: at most %d sockets per token", sockets.limit)}
		}
		// The upgrade request's context ends with the socket.
		context.AfterFunc(ctx, release)
		ctx = core.WithPrincipal(ctx, p)
		ctx = context.WithValue(ctx, onSocketKey{}, true)
		// The connection lives no longer than its token: at expiry wsproto
		// closes it with 4403.
		ctx, cancel := wsproto.WithExpiry(ctx, p.ExpiresAt)
		// The upgrade request's context ends with the socket and takes this
		// one with it; cancel frees the timer at once when that happens.
		context.AfterFunc(ctx, cancel)
		return ctx, nil, nil // no ack payload: the token is never echoed
	}
}

// MaxSocketsPerToken bounds the WebSockets one access token may hold open
// on one replica: each socket costs a goroutine and buffers, and a token
// (a rider's one included) must not be able to open them without limit.
const MaxSocketsPerToken = 10

// socketCounter counts open sockets per token. Tokens are keyed by their
// SHA-256, and only while a socket is open, so the map is bounded by the
// open sockets.
type socketCounter struct {
	limit int
	mu    sync.Mutex
	open  map[[sha256.Size]byte]int
}

func newSocketCounter(limit int) *socketCounter {
	return &socketCounter{limit: limit, open: map[[sha256.Size]byte]int{}}
}

// acquire takes a socket for token; release gives it back (once).
func (c *socketCounter) acquire(token string) (release func(), ok bool) {
	key := sha256.Sum256([]byte(token))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open[key] >= c.limit {
		return nil, false
	}
	c.open[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.open[key]--; c.open[key] <= 0 {
				delete(c.open, key)
			}
		})
	}, true
}

// onSocketKey marks the context of a socket's operations.
type onSocketKey struct{}

// socketRateLimit counts every operation started on a WebSocket
// (graphql-transport-ws subscribe, graphql-ws start) as one request of the
// socket's account: a socket is one HTTP request, and its operations would
// otherwise escape the limit. Over the limit the operation alone is refused
// with RATE_LIMITED and retryAfter (seconds); the socket and its other
// operations go on, so a client waits and retries as it would over HTTP.
type socketRateLimit struct{ limit *core.APIRateLimit }

func (socketRateLimit) ExtensionName() string                   { return "SocketRateLimit" }
func (socketRateLimit) Validate(graphql.ExecutableSchema) error { return nil }

func (l socketRateLimit) MutateOperationParameters(ctx context.Context, _ *graphql.RawParams) *gqlerror.Error {
	if ctx.Value(onSocketKey{}) == nil {
		return nil // over HTTP: rest counted the request
	}
	p, err := core.PrincipalFrom(ctx)
	if err != nil {
		return nil
	}
	_, err = l.limit.Take(ctx, p)
	var ce *core.Error
	if !errors.As(err, &ce) {
		return nil
	}
	wait := max(ce.RetryAfter, time.Second)
	gerr := gqlerror.Errorf("%s", ce.Message)
	gerr.Extensions = map[string]any{"code": string(ce.Code), "retryAfter": int((wait + time.Second - 1) / time.Second)}
	return gerr
}

var _ graphql.OperationParameterMutator = socketRateLimit{}

// deadlineAnswer answers an operation whose request deadline
// (MOUNTD_REQUEST_TIMEOUT) passed before it ran UNAVAILABLE: gqlgen answers
// an operation whose context has ended with nothing at all.
func deadlineAnswer(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	handler := next(ctx)
	return func(ctx context.Context) *graphql.Response {
		resp := handler(ctx)
		if resp == nil && core.DeadlineError(ctx) != nil {
			err := gqlerror.Errorf("%s", core.ErrRequestDeadline.Message)
			err.Extensions = unavailableExtensions()
			return &graphql.Response{Errors: gqlerror.List{err}}
		}
		return resp
	}
}

// unavailableExtensions is the extensions of an UNAVAILABLE answer, with
// the seconds to wait as REST's Retry-After says them.
func unavailableExtensions() map[string]any {
	return map[string]any{"code": string(core.CodeUnavailable), "retryAfter": int(core.UnavailableRetry / time.Second)}
}

// routeReads lets a query's reads go to a read replica (unless its client
// wrote within the replicas' allowed lag) and pins the client to the
// primary before a mutation. Subscriptions read the primary: they follow
// the event log.
func routeReads(reads *dbread.Policy) graphql.OperationMiddleware {
	return func(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
		oc := graphql.GetOperationContext(ctx)
		p, err := core.PrincipalFrom(ctx)
		if err != nil || oc == nil || oc.Operation == nil {
			return next(ctx)
		}
		switch oc.Operation.Operation {
		case ast.Query:
			ctx = reads.Read(ctx, p.TokenID)
		case ast.Mutation:
			reads.Write(ctx, p.TokenID)
		}
		return next(ctx)
	}
}
