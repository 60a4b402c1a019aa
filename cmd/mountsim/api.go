package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/protocol"
)

// requestTimeout bounds one HTTP exchange. Requests run on a context of
// their own, so a stop lets the ones in flight finish.
const requestTimeout = 15 * time.Second

// apiClient calls mountd, and only mountd: the token endpoint is the
// embedded identity provider at the same root, and redirects are not
// followed anywhere.
type apiClient struct {
	sem        chan struct{}
	http       *http.Client   // the phones' SDK clients share it
	maintainer *client.Client // role:restricted without mount items: reports states
	owner      *client.Client // owner role: association
	// rider is a restricted token with mount items (a rider's phone), for
	// --forge; nil without riderMounts.
	rider *client.Client
}

// newAPIClient makes the clients; riderMounts are the mount: items of the
// rider token (none: no rider token).
func newAPIClient(cfg Config, riderMounts []string) *apiClient {
	hc := &http.Client{
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConnsPerHost: cfg.Concurrency,
			IdleConnTimeout:     90 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	aud := protocol.AudienceItem(cfg.IDPName, cfg.ProjectID)
	withScope := func(scope ...string) *client.Client {
		src := client.CredentialsSource(client.ClientCredentials(cfg.API, cfg.ClientID, cfg.ClientSecret, scope), hc)
		return client.New(cfg.API, src, client.Options{HTTPClient: hc})
	}
	a := &apiClient{
		sem:        make(chan struct{}, cfg.Concurrency),
		http:       hc,
		maintainer: withScope("openid", "sub", aud, "role:restricted"),
		owner:      withScope("openid", "sub", aud),
	}
	if len(riderMounts) > 0 {
		scope := []string{"openid", "sub", aud, "role:restricted"}
		for _, uid := range riderMounts {
			scope = append(scope, "mount:"+uid)
		}
		a.rider = withScope(scope...)
	}
	return a
}

// errNotSent: the run stopped before the request could go out.
var errNotSent = errors.New("not sent: stopping")

// errorKind groups errors for the summary: "404 MOUNT_NOT_FOUND",
// "network", ...
func errorKind(err error) string {
	var ce *client.Error
	if errors.As(err, &ce) {
		return strings.TrimSpace(fmt.Sprintf("%d %s", ce.Status, ce.Code))
	}
	var refused *associateRefused
	if errors.As(err, &refused) {
		return "refused " + refused.reason
	}
	if strings.Contains(err.Error(), "identity provider") {
		return "token"
	}
	return "network"
}

// The waits between two attempts of an upload that met a transient
// failure: doubling from retryFirst up to retryLongest, or what the
// answer's Retry-After asks, up to retryAfterLongest.
const (
	retryFirst        = 250 * time.Millisecond
	retryLongest      = 10 * time.Second
	retryAfterLongest = time.Minute
)

// keep sends an upload (a mount's states or receipts: the API takes them
// again as duplicates, so a second attempt is harmless) until the API
// answers it: a transient failure (client.Transient: no answer, 502, 503,
// 504 from a proxy whose replica restarts, 408, 429) is tried again after
// a bounded wait, calling retried each time. Only the run's end stops it:
// then it returns errNotSent before the first attempt, the last failure
// after one.
func (a *apiClient) keep(ctx context.Context, c *client.Client, method, path string, body, out any, retried func()) error {
	wait := retryFirst
	var last error
	for {
		err := a.call(ctx, c, method, path, body, out)
		if errors.Is(err, errNotSent) && last != nil {
			return last
		}
		if !client.Transient(err) {
			return err
		}
		last = err
		d := client.RetryWait(err, wait, retryAfterLongest)
		wait = min(2*wait, retryLongest)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		retried()
	}
}

// call sends an API call (path under /api/v1), at most Concurrency at once.
func (a *apiClient) call(ctx context.Context, c *client.Client, method, path string, body, out any) error {
	select {
	case a.sem <- struct{}{}:
		defer func() { <-a.sem }()
	case <-ctx.Done():
		return errNotSent
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requestTimeout)
	defer cancel()
	return c.Do(rctx, method, path, body, out)
}
