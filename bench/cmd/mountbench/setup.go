package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"
	"golang.org/x/oauth2"

	"github.com/mountd/mountd/adapters/bunstore"
	"github.com/mountd/mountd/bench/internal/benchstat"
	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/core"
)

// bench holds what every phase shares: the HTTP client, the database, the
// account's token and the mounts.
type bench struct {
	cfg    config
	log    io.Writer
	client *http.Client
	db     *bun.DB
	store  *bunstore.Store
	close  func()
	runID  string
	token  string
	// tokens are the account's tokens of servers other than --base (--base-b).
	tokens map[string]string
	uids   []string
	// clientID and clientSecret are the account's, for tokens of other
	// scopes (a rider's, in graphqlflood).
	clientID, clientSecret string
	accountID              string
	cpu                    *cpuWatch
}

func newBench(ctx context.Context, cfg config, log io.Writer) (*bench, error) {
	store, closeStore, err := bunstore.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	if !store.Postgres() {
		closeStore()
		return nil, fmt.Errorf("--database-url must be PostgreSQL")
	}
	b := &bench{cfg: cfg, log: log, client: newHTTPClient(max(cfg.Clients, cfg.OnboardClients), cfg.Timeout), db: store.DB(), store: store, close: closeStore}
	var id [4]byte
	_, _ = rand.Read(id[:])
	b.runID = hex.EncodeToString(id[:])
	watch, _ := parseWatch(cfg.Watch)
	b.cpu = newCPUWatch(ctx, b.db, watch)
	return b, nil
}

// newHTTPClient keeps one idle keep-alive connection per client.
func newHTTPClient(clients int, timeout time.Duration) *http.Client {
	tr := &http.Transport{
		Proxy:               nil,
		MaxIdleConns:        clients * 2,
		MaxIdleConnsPerHost: clients,
		MaxConnsPerHost:     clients,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "mountbench: "+format+"\n", args...)
}

// quiet waits, for at most 10 minutes, for a quiet machine before a
// measurement (--max-load, --max-busy).
func (b *bench) quiet(ctx context.Context) {
	q := benchstat.Quiet{MaxLoad: b.cfg.MaxLoad, MaxBusy: b.cfg.MaxBusy, Timeout: 10 * time.Minute}
	q.Wait(ctx, b.logf)
}

// setup creates the account in the database, asks the embedded identity
// provider for an owner token and associates --mounts mounts.
func (b *bench) setup(ctx context.Context) error {
	store, closeStore, err := bunstore.Open(ctx, b.cfg.DatabaseURL)
	if err != nil {
		return err
	}
	acc, err := core.NewAccountService(store, nil).Create(ctx, "mountbench "+b.runID)
	closeStore()
	if err != nil {
		return fmt.Errorf("create account: %w", err)
	}
	b.clientID, b.clientSecret, b.accountID = acc.ClientID, acc.ClientSecret, acc.AccountID
	if b.token, err = b.fetchToken(ctx, acc.ClientID, acc.ClientSecret); err != nil {
		return err
	}
	b.uids = make([]string, b.cfg.Mounts)
	for i := range b.uids {
		b.uids[i] = fmt.Sprintf("mb-%s-%05d", b.runID, i)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	next := make(chan string)
	for range min(b.cfg.Clients, 8) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for uid := range next {
				if err := b.associate(ctx, uid); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for _, uid := range b.uids {
		next <- uid
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	b.logf("account %s, %d mounts associated in %s", acc.AccountID, len(b.uids), time.Since(start).Round(time.Millisecond))
	return nil
}

// fetchToken asks the identity provider for a token with the bench's scope.
func (b *bench) fetchToken(ctx context.Context, clientID, secret string) (string, error) {
	return b.fetchTokenScope(ctx, clientID, secret, b.cfg.Scope)
}

// fetchTokenScope asks the identity provider for a token with scope.
func (b *bench) fetchTokenScope(ctx context.Context, clientID, secret, scope string) (string, error) {
	return b.fetchTokenAt(ctx, b.cfg.Base, clientID, secret, scope)
}

// fetchTokenAt asks the identity provider at base: each server signs with
// its own key.
func (b *bench) fetchTokenAt(ctx context.Context, base, clientID, secret, scope string) (string, error) {
	ctx = context.WithValue(ctx, oauth2.HTTPClient, b.client)
	tok, err := client.ClientCredentials(base, clientID, secret, strings.Fields(scope)).Token(ctx)
	if err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	return tok.AccessToken, nil
}

func (b *bench) associate(ctx context.Context, uid string) error {
	body, _ := json.Marshal(map[string]string{"uid": uid})
	if status, raw, err := b.api(ctx, http.MethodPost, "/api/v1/mounts", body); err != nil || status != http.StatusOK {
		return fmt.Errorf("POST /api/v1/mounts %s: %d %s %v", uid, status, raw, err)
	}
	if status, raw, err := b.api(ctx, http.MethodPost, "/api/v1/mounts/"+uid+"/confirm-association", nil); err != nil || status != http.StatusOK {
		return fmt.Errorf("confirm-association %s: %d %s %v", uid, status, raw, err)
	}
	return nil
}

// api sends one authorised API request (path under /api/v1) through the
// shared client and returns the status and the answer (the problem's detail
// for an error).
func (b *bench) api(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	var in any
	if body != nil {
		in = json.RawMessage(body)
	}
	var out json.RawMessage
	err := client.New(b.cfg.Base, client.StaticToken(b.token), client.Options{HTTPClient: b.client}).
		Do(ctx, method, strings.TrimPrefix(path, "/api/v1"), in, &out)
	var ce *client.Error
	switch {
	case errors.As(err, &ce):
		return ce.Status, []byte(ce.Detail), nil
	case err != nil:
		return 0, nil, err
	}
	return http.StatusOK, out, nil
}

// seed gives every mount one entry per code, so that GET answers carry
// computed fields when the ingest phase did not run. Before the rules
// scenario the entries are older than its own (its generator starts 48
// hours back): its reports must move the latest values, or its rules never
// change state.
func (b *bench) seed(ctx context.Context) error {
	base := time.Now()
	if b.cfg.runs("rules") {
		base = base.Add(-49 * time.Hour)
	}
	g := newGenerator(4, base)
	var buf []byte
	for i, uid := range b.uids {
		buf = g.appendBody(buf[:0], g.next(i))
		status, raw, err := b.api(ctx, http.MethodPost, "/api/v1/mounts/"+uid+"/states", buf)
		if err != nil || status != http.StatusOK {
			return fmt.Errorf("seed %s: %d %s %v", uid, status, raw, err)
		}
	}
	return nil
}
