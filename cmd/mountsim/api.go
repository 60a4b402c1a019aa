package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/mountd/mountd/core"
)

// requestTimeout bounds one HTTP exchange. Requests run on a context of
// their own, so a stop lets the ones in flight finish.
const requestTimeout = 15 * time.Second

// apiClient calls mountd, and only mountd: the token endpoint is the
// embedded identity provider at the same root, and redirects are not
// followed anywhere.
type apiClient struct {
	base       string
	http       *http.Client
	sem        chan struct{}
	maintainer *tokenSource // role:restricted without mount items: reports states
	owner      *tokenSource // owner role: association
}

func newAPIClient(cfg Config) *apiClient {
	base := strings.TrimRight(cfg.API, "/")
	hc := &http.Client{
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConnsPerHost: cfg.Concurrency,
			IdleConnTimeout:     90 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	aud := core.ScopeRules{IDPName: cfg.IDPName, ProjectID: cfg.ProjectID}.AudienceItem()
	src := func(scope string) *tokenSource {
		return &tokenSource{url: base + "/oauth/v2/token", http: hc, clientID: cfg.ClientID, secret: cfg.ClientSecret, scope: scope}
	}
	return &apiClient{
		base: base, http: hc, sem: make(chan struct{}, cfg.Concurrency),
		maintainer: src("openid sub " + aud + " role:restricted"),
		owner:      src("openid sub " + aud),
	}
}

// errNotSent: the run stopped before the request could go out.
var errNotSent = errors.New("not sent: stopping")

// httpError is an answer other than 2xx.
type httpError struct {
	status int
	code   string // the problem's code, when there is one
}

func (e *httpError) Error() string {
	if e.code != "" {
		return fmt.Sprintf("HTTP %d %s", e.status, e.code)
	}
	return fmt.Sprintf("HTTP %d", e.status)
}

// errorKind groups errors for the summary: "404 MOUNT_NOT_FOUND",
// "network", ...
func errorKind(err error) string {
	var he *httpError
	if errors.As(err, &he) {
		return strings.TrimSpace(fmt.Sprintf("%d %s", he.status, he.code))
	}
	return "network"
}

// call sends body as JSON and decodes a 2xx answer into out. A 401 gets
// one retry with a fresh token.
func (a *apiClient) call(ctx context.Context, tokens *tokenSource, method, path string, body, out any) error {
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return err
		}
	}
	select {
	case a.sem <- struct{}{}:
		defer func() { <-a.sem }()
	case <-ctx.Done():
		return errNotSent
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requestTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		tok, err := tokens.get(rctx)
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(rctx, method, a.base+path, bytes.NewReader(raw))
		if err != nil {
			return err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Access-Key", tok)
		res, err := a.http.Do(req)
		if err != nil {
			return err
		}
		answer, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		res.Body.Close()
		if err != nil {
			return err
		}
		if res.StatusCode == http.StatusUnauthorized && attempt == 0 {
			tokens.invalidate(tok)
			continue
		}
		if res.StatusCode/100 != 2 {
			var problem struct {
				Code string `json:"code"`
			}
			_ = json.Unmarshal(answer, &problem)
			return &httpError{status: res.StatusCode, code: problem.Code}
		}
		if out != nil {
			if err := json.Unmarshal(answer, out); err != nil {
				return fmt.Errorf("%s %s: %w", method, path, err)
			}
		}
		return nil
	}
}

// tokenSource keeps one access token and gets a new one before it expires
// (at four fifths of its lifetime), so reports never carry a stale token.
type tokenSource struct {
	url, clientID, secret, scope string
	http                         *http.Client

	mu      sync.Mutex
	token   string
	renewAt time.Time
}

func (s *tokenSource) get(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token != "" && time.Now().Before(s.renewAt) {
		return s.token, nil
	}
	form := url.Values{"grant_type": {"client_credentials"}, "scope": {s.scope},
		"client_id": {s.clientID}, "client_secret": {s.secret}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := s.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	defer res.Body.Close()
	var tok struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int64  `json:"expires_in"`
		Error       string `json:"error"`
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, 1<<20)).Decode(&tok); err != nil || res.StatusCode != http.StatusOK || tok.AccessToken == "" {
		return "", fmt.Errorf("token: %w", &httpError{status: res.StatusCode, code: tok.Error})
	}
	life := time.Duration(tok.ExpiresIn) * time.Second
	if life <= 0 {
		life = time.Hour
	}
	s.token, s.renewAt = tok.AccessToken, time.Now().Add(life*4/5)
	return s.token, nil
}

// invalidate drops a token the API refused, unless a newer one came since.
func (s *tokenSource) invalidate(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token == tok {
		s.token = ""
	}
}
