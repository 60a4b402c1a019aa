package sdk

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/protocol"
)

// apiClient talks to the mountd API (through the shared client) and to its
// identity provider with the token.
type apiClient struct {
	api  *client.Client
	http *http.Client

	// onOffline receives the API's answer to each upload of offline
	// receipts (its ack); set once, before the first upload.
	onOffline func(uid string, answer offlineAnswer)

	mu       sync.Mutex
	userinfo string // found through discovery, once
}

// APIError is an API answer other than success, from its problem document.
type APIError = client.Error

func newAPIClient(base string, tokens oauth2.TokenSource, hc *http.Client) *apiClient {
	root := strings.TrimSuffix(strings.TrimRight(base, "/"), "/api/v1")
	return &apiClient{api: client.New(root, tokens, client.Options{HTTPClient: hc}), http: hc}
}

// token is the source's access token now.
func (a *apiClient) token() (string, error) {
	tok, err := a.api.Token()
	if err != nil {
		return "", fmt.Errorf("sdk: no access token: %w", err)
	}
	return tok, nil
}

func (a *apiClient) do(ctx context.Context, method, path string, body, out any) error {
	return a.api.Do(ctx, method, path, body, out)
}

// errTokenExpired: the token's exp has passed (the API would answer 401).
var errTokenExpired = fmt.Errorf("%w: expired", ErrTokenRejected)

// tokenClaims reads the token's claims without verifying them: the
// identity provider verifies; this only finds the issuer and the scope.
func tokenClaims(token string) (iss string, scope []string, exp time.Time, err error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", nil, time.Time{}, fmt.Errorf("%w: not a JWT", ErrTokenRejected)
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", nil, time.Time{}, fmt.Errorf("%w: malformed", ErrTokenRejected)
	}
	var c struct {
		Iss   string `json:"iss"`
		Scope string `json:"scope"`
		Exp   int64  `json:"exp"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return "", nil, time.Time{}, fmt.Errorf("%w: malformed claims", ErrTokenRejected)
	}
	return strings.TrimRight(c.Iss, "/"), strings.Fields(c.Scope), time.Unix(c.Exp, 0), nil
}

// validate asks the identity provider whether the token is valid (its
// userinfo endpoint, found through discovery) and checks that its scope
// reaches uid. It runs before anything is written over BLE.
func (a *apiClient) validate(ctx context.Context, uid string) error {
	token, err := a.token()
	if err != nil {
		return err
	}
	iss, scope, exp, err := tokenClaims(token)
	if err != nil {
		return err
	}
	if time.Now().After(exp) {
		return errTokenExpired
	}
	endpoint, err := a.userinfoEndpoint(ctx, iss)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("sdk: identity provider unreachable: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		// The status stays readable (client.StatusOf): a 401 or a 5xx lets
		// an action fall back to a stored grant.
		return fmt.Errorf("%w: %w", ErrTokenRejected,
			&client.Error{Status: res.StatusCode, Detail: "the userinfo endpoint did not accept the token"})
	}
	var info struct {
		Scope string `json:"scope"`
	}
	if err := json.NewDecoder(res.Body).Decode(&info); err != nil {
		return fmt.Errorf("%w: unreadable userinfo", ErrTokenRejected)
	}
	if info.Scope != "" {
		scope = strings.Fields(info.Scope)
	}
	return scopeAllows(scope, uid)
}

// scopeAllows applies docs/api.md, "Identity" to a mount: the mandatory items must be
// there; a restricted token with mount items reaches only those mounts.
func scopeAllows(scope []string, uid string) error {
	var openid, sub, aud, restricted bool
	var mounts []string
	for _, item := range scope {
		switch {
		case item == "openid":
			openid = true
		case item == "sub":
			sub = true
		case strings.HasPrefix(item, "urn:") && strings.HasSuffix(item, ":aud"):
			aud = true
		case item == "role:restricted":
			restricted = true
		case strings.HasPrefix(item, "mount:"):
			mounts = append(mounts, strings.TrimPrefix(item, "mount:"))
		}
	}
	if !openid || !sub || !aud {
		return fmt.Errorf("%w: a mandatory scope item is missing", ErrTokenRejected)
	}
	if !restricted || len(mounts) == 0 {
		return nil
	}
	for _, m := range mounts {
		if m == uid {
			return nil
		}
	}
	return fmt.Errorf("%w: %s", ErrMountNotAllowed, uid)
}

func (a *apiClient) userinfoEndpoint(ctx context.Context, issuer string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.userinfo != "" {
		return a.userinfo, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, issuer+"/.well-known/openid-configuration", nil)
	if err != nil {
		return "", fmt.Errorf("%w: bad issuer %q", ErrTokenRejected, issuer)
	}
	res, err := a.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("sdk: identity provider unreachable: %w", err)
	}
	defer res.Body.Close()
	var doc struct {
		Userinfo string `json:"userinfo_endpoint"`
	}
	if res.StatusCode != http.StatusOK || json.NewDecoder(res.Body).Decode(&doc) != nil || doc.Userinfo == "" {
		// The status stays readable (client.StatusOf), as for userinfo.
		return "", fmt.Errorf("sdk: identity provider discovery failed: %w",
			&client.Error{Status: res.StatusCode, Detail: "no userinfo endpoint in the discovery document"})
	}
	a.userinfo = doc.Userinfo
	return a.userinfo, nil
}

// command fetches one fresh signed command for uid.
func (a *apiClient) command(ctx context.Context, uid, code string, params map[string]string) (protocol.BLECommand, error) {
	q := url.Values{"code": {code}}
	for k, v := range params {
		q.Set(k, v)
	}
	var cmds []protocol.BLECommand
	if err := a.do(ctx, http.MethodGet, "/mounts/"+url.PathEscape(uid)+"/query?"+q.Encode(), nil, &cmds); err != nil {
		return protocol.BLECommand{}, err
	}
	if len(cmds) != 1 {
		return protocol.BLECommand{}, fmt.Errorf("sdk: the API returned %d commands", len(cmds))
	}
	return cmds[0], nil
}

// reaches says whether the token may upload for uid now, from its claims
// (no call): an expired token can upload nothing (ErrTokenRejected); a
// restricted token with mount items only for those (ErrMountNotAllowed).
// A token whose claims cannot be read is left to the API to judge.
func (a *apiClient) reaches(uid string) error {
	token, err := a.token()
	if err != nil {
		return err // nothing can go until the source gives one
	}
	_, scope, exp, err := tokenClaims(token)
	if err != nil {
		return nil
	}
	if exp.Unix() != 0 && time.Now().After(exp) {
		return fmt.Errorf("%w: expired", ErrTokenRejected)
	}
	if err := scopeAllows(scope, uid); errors.Is(err, ErrMountNotAllowed) {
		return err
	}
	return nil
}
