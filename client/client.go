// Package client is the Go client of mountd's API, used by the SDK, mountctl,
// mountsim and the load tools: REST calls with problem+json errors, access
// tokens from the identity provider (client credentials, through
// golang.org/x/oauth2/clientcredentials) and GraphQL subscriptions over
// graphql-transport-ws.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// maxAnswer bounds what is read of one answer.
const maxAnswer = 4 << 20

// Error is an API answer other than success, from its problem document.
type Error struct {
	Status int          `json:"status"`
	Code   string       `json:"code"`
	Detail string       `json:"detail"`
	Fields []FieldError `json:"errors"`
	// RetryAfter is the wait the answer's Retry-After header asked for
	// (zero when it had none).
	RetryAfter time.Duration `json:"-"`
}

// FieldError names one invalid input.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Detail)
	for _, f := range e.Fields {
		msg += fmt.Sprintf("; %s %s", f.Field, f.Message)
	}
	return strings.TrimSpace(msg)
}

// StatusOf returns the HTTP status of an *Error in err's chain, 0 otherwise.
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// Transient says whether err is one that the same request may not meet
// again: mountd, or the proxy in front of it, could not be reached
// (no answer, or an answer cut short), or answered that it could not
// serve it now: 502, 503 and 504 (a replica restarting behind a proxy),
// 408 and 429. A client that must not lose what it sends keeps it and
// tries again, after RetryAfterOf(err) when that is set.
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	switch StatusOf(err) {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout,
		http.StatusRequestTimeout, http.StatusTooManyRequests:
		return true
	case 0:
		var ne net.Error
		return errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
			errors.Is(err, context.DeadlineExceeded)
	}
	return false
}

// RetryAfterOf is the wait asked for by the Retry-After of the answer in
// err's chain, zero when none.
func RetryAfterOf(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAfter
	}
	return 0
}

// RetryWait is the wait before trying again after err: between half of
// backoff and all of it (jitter, so that clients refused together do not
// come back together), or what the answer's Retry-After asked for when
// that is longer, up to longest.
func RetryWait(err error, backoff, longest time.Duration) time.Duration {
	d := backoff/2 + rand.N(backoff/2+1)
	if asked := RetryAfterOf(err); asked > d {
		d = min(asked, longest)
	}
	return d
}

// maxRetryAfter bounds the wait a Retry-After may ask for.
const maxRetryAfter = time.Hour

// retryAfter reads a Retry-After header: seconds, or an HTTP date; zero
// when absent, unreadable or past; at most maxRetryAfter.
func retryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		d = time.Duration(min(secs, int64(maxRetryAfter/time.Second))) * time.Second
	} else if at, err := http.ParseTime(v); err == nil {
		d = at.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}

// Client calls one mountd. Safe for concurrent use.
type Client struct {
	base   string // the server root, without a trailing slash
	http   *http.Client
	tokens *tokens
}

// Options tune a Client.
type Options struct {
	// HTTPClient sends the requests; nil: one that follows no redirects.
	HTTPClient *http.Client
}

// New returns a client of the server at base (its root, e.g.
// http://127.0.0.1:8080) that authenticates with tokens from src.
func New(base string, src oauth2.TokenSource, opts ...Options) *Client {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return &Client{base: strings.TrimRight(base, "/"), http: hc, tokens: &tokens{src: src}}
}

// Renews says whether the client's token source gives a fresh token when
// the server refuses one (client credentials), rather than one fixed token.
func (c *Client) Renews() bool {
	_, ok := c.tokens.src.(interface{ Forget() })
	return ok
}

// TokenSource is the client's source of access tokens, to share with
// another client of the same principal (the SDK's).
func (c *Client) TokenSource() oauth2.TokenSource { return c.tokens.src }

// Token returns a current access token of the client's source.
func (c *Client) Token() (string, error) { return c.tokens.token() }

// Base is the server root the client calls.
func (c *Client) Base() string { return c.base }

// StaticToken is a token source of one access token (a rider's phone, a
// token given on the command line).
func StaticToken(accessToken string) oauth2.TokenSource {
	return oauth2.StaticTokenSource(&oauth2.Token{AccessToken: accessToken})
}

// ClientCredentials returns the client-credentials configuration of the
// embedded identity provider at base, asking for scope.
func ClientCredentials(base, clientID, secret string, scope []string) *clientcredentials.Config {
	return &clientcredentials.Config{ClientID: clientID, ClientSecret: secret, Scopes: scope,
		TokenURL: strings.TrimRight(base, "/") + "/oauth/v2/token", AuthStyle: oauth2.AuthStyleInHeader}
}

// Credentials is a source of client-credentials tokens that keeps one
// until shortly before it expires, and can forget it when the API refuses
// it (a rotated secret, a restarted issuer).
type Credentials struct {
	cfg *clientcredentials.Config
	ctx context.Context
	mu  sync.Mutex
	src oauth2.TokenSource
}

// CredentialsSource returns a Credentials for cfg; hc sends the token
// requests (nil: http.DefaultClient).
func CredentialsSource(cfg *clientcredentials.Config, hc *http.Client) *Credentials {
	ctx := context.Background()
	if hc != nil {
		ctx = context.WithValue(ctx, oauth2.HTTPClient, hc)
	}
	return &Credentials{cfg: cfg, ctx: ctx, src: cfg.TokenSource(ctx)}
}

// Token implements oauth2.TokenSource.
func (c *Credentials) Token() (*oauth2.Token, error) {
	c.mu.Lock()
	src := c.src
	c.mu.Unlock()
	return src.Token()
}

// Forget drops the kept token: the next Token asks for a new one.
func (c *Credentials) Forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.src = c.cfg.TokenSource(c.ctx)
}

// tokens is the client's source of access tokens.
type tokens struct {
	src oauth2.TokenSource
}

func (t *tokens) token() (string, error) {
	tok, err := t.src.Token()
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) {
			if re.Response != nil && Transient(&Error{Status: re.Response.StatusCode}) {
				// Not a refusal: the token endpoint (behind the same proxy)
				// could not answer now.
				return "", &Error{Status: re.Response.StatusCode, Detail: "the identity provider could not answer now",
					RetryAfter: retryAfter(re.Response.Header, time.Now())}
			}
			return "", fmt.Errorf("the identity provider refused: %s %s", re.ErrorCode, re.ErrorDescription)
		}
		return "", fmt.Errorf("token: %w", err)
	}
	return tok.AccessToken, nil
}

// refused makes a renewing source forget the token the API refused; a
// static source has nothing else to give.
func (t *tokens) refused() bool {
	f, ok := t.src.(interface{ Forget() })
	if ok {
		f.Forget()
	}
	return ok
}

// Do sends an API call under /api/v1 (path starts with "/"): body as JSON
// when not nil, the answer decoded into out when not nil. A 401 is retried
// once with a fresh token when the source can give one.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return err
		}
	}
	for attempt := 0; ; attempt++ {
		tok, err := c.tokens.token()
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, method, c.base+"/api/v1"+path, bytes.NewReader(raw))
		if err != nil {
			return err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Access-Key", tok)
		res, err := c.http.Do(req)
		if err != nil {
			return fmt.Errorf("cannot reach mountd at %s: %w", c.base, err)
		}
		answer, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer))
		res.Body.Close()
		if err != nil {
			return err
		}
		if res.StatusCode == http.StatusUnauthorized && attempt == 0 && c.tokens.refused() {
			continue
		}
		if res.StatusCode/100 != 2 {
			return answerError(res, answer)
		}
		if out != nil && len(answer) > 0 {
			if err := json.Unmarshal(answer, out); err != nil {
				return fmt.Errorf("%s %s: %w", method, path, err)
			}
		}
		return nil
	}
}

// answerError is the *Error of an answer that is not a success.
func answerError(res *http.Response, answer []byte) *Error {
	e := &Error{Status: res.StatusCode}
	if json.Unmarshal(answer, e) != nil || e.Code == "" {
		e.Detail = strings.TrimSpace(string(answer))
	}
	e.Status = res.StatusCode
	e.RetryAfter = retryAfter(res.Header, time.Now())
	return e
}

// Download streams the answer of a GET under /api/v1 (path starts with
// "/", an export) into w and returns how many bytes it wrote. ctx alone
// bounds it: an export of a big fleet outlasts the client's timeout of
// ordinary calls. An error answer is an *Error, as with Do; an answer cut
// short (the server aborts an export that fails midway) is an error too,
// never a short success.
func (c *Client) Download(ctx context.Context, path string, w io.Writer) (int64, error) {
	hc := *c.http
	hc.Timeout = 0
	for attempt := 0; ; attempt++ {
		tok, err := c.tokens.token()
		if err != nil {
			return 0, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/api/v1"+path, nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("Access-Key", tok)
		res, err := hc.Do(req)
		if err != nil {
			return 0, fmt.Errorf("cannot reach mountd at %s: %w", c.base, err)
		}
		if res.StatusCode/100 != 2 {
			answer, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer))
			res.Body.Close()
			if err != nil {
				return 0, err
			}
			if res.StatusCode == http.StatusUnauthorized && attempt == 0 && c.tokens.refused() {
				continue
			}
			return 0, answerError(res, answer)
		}
		n, err := io.Copy(w, res.Body)
		res.Body.Close()
		if err != nil {
			return n, fmt.Errorf("GET %s: the answer ended after %d bytes: %w", path, n, err)
		}
		return n, nil
	}
}

// Mount is a mount as the API shows it.
type Mount struct {
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
	AssociatedAt     *string  `json:"associatedAt"`
	// DevicePublicKey is the mount's own key pinned by its association,
	// nil for a mount without one.
	DevicePublicKey *string `json:"devicePublicKey"`
	// LastSeenAt is the server's time of the last accepted report or
	// receipt upload, nil before any; Presence is UNKNOWN, ONLINE or
	// OFFLINE.
	LastSeenAt *string `json:"lastSeenAt"`
	Presence   string  `json:"presence"`
}

// AlarmCondition is one condition of an alarm rule: Code Op Value on the
// mount's latest value, or Presence ("OFFLINE").
type AlarmCondition struct {
	Code     string `json:"code,omitempty"`
	Op       string `json:"op,omitempty"`
	Value    string `json:"value,omitempty"`
	Presence string `json:"presence,omitempty"`
}

// AlarmRule is an alarm rule as the API shows it.
type AlarmRule struct {
	ID         string           `json:"id"`
	Name       string           `json:"name"`
	Severity   string           `json:"severity"`
	Conditions []AlarmCondition `json:"conditions"`
	ForSeconds int              `json:"forSeconds"`
	MountUIDs  []string         `json:"mountUids"`
	Enabled    bool             `json:"enabled"`
	CreatedAt  string           `json:"createdAt"`
	UpdatedAt  string           `json:"updatedAt"`
}

// Alarm is an alarm as the API shows it.
type Alarm struct {
	ID             string  `json:"id"`
	RuleID         string  `json:"ruleId"`
	RuleName       string  `json:"ruleName"`
	UID            string  `json:"uid"`
	Severity       string  `json:"severity"`
	State          string  `json:"state"`
	RaisedAt       string  `json:"raisedAt"`
	ClearedAt      *string `json:"clearedAt"`
	AcknowledgedAt *string `json:"acknowledgedAt"`
	AcknowledgedBy *string `json:"acknowledgedBy"`
	// AcknowledgedByName is the person's username or the client's name.
	AcknowledgedByName *string           `json:"acknowledgedByName"`
	Values             map[string]string `json:"values"`
}

// Webhook is a webhook as the API shows it; Secret only at creation and
// rotation.
type Webhook struct {
	ID          string   `json:"id"`
	URL         string   `json:"url"`
	EventTypes  []string `json:"eventTypes"`
	MountUIDs   []string `json:"mountUids"`
	Description string   `json:"description"`
	Enabled     bool     `json:"enabled"`
	Secret      string   `json:"secret,omitempty"`
}

// Delivery is one attempt to deliver an event to a webhook.
type Delivery struct {
	ID             string  `json:"id"`
	EventID        string  `json:"eventId"`
	EventType      string  `json:"eventType"`
	Attempt        int     `json:"attempt"`
	Status         string  `json:"status"`
	ResponseStatus *int    `json:"responseStatus"`
	Error          *string `json:"error"`
	DurationMs     *int64  `json:"durationMs"`
	AttemptedAt    *string `json:"attemptedAt"`
	NextAttemptAt  *string `json:"nextAttemptAt"`
}
