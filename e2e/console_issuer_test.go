package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"

	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/client"
)

// otherIssuer is zitadel/oidc's example OpenID provider, configured as an
// operator's own provider would be for mountd: a public client of its own
// name that issues JWT access tokens, the account in a "tenant" claim and
// mountd's scope items as a "permissions" array, mountd's project in the
// audience. Nothing in it is mountd's code.
type otherIssuer struct {
	*storage.Storage
	client *issuerClient
	// grants maps the provider's user ids to their permissions.
	grants map[string][]string
	tenant string
}

func (s *otherIssuer) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	if id == s.client.id {
		return s.client, nil
	}
	return s.Storage.GetClientByClientID(ctx, id)
}

func (s *otherIssuer) GetPrivateClaimsFromScopes(_ context.Context, userID, _ string, _ []string) (map[string]any, error) {
	return map[string]any{"tenant": s.tenant, "permissions": s.grants[userID]}, nil
}

func (s *otherIssuer) AuthRequestByCode(ctx context.Context, code string) (op.AuthRequest, error) {
	req, err := s.Storage.AuthRequestByCode(ctx, code)
	if err != nil {
		return nil, err
	}
	return forMountd{req}, nil
}

// forMountd names mountd's project in the audience of the tokens issued.
type forMountd struct{ op.AuthRequest }

func (r forMountd) GetAudience() []string { return append(r.AuthRequest.GetAudience(), "mountd") }

// issuerClient is the console's registration at the other provider.
type issuerClient struct {
	id string
	mu sync.Mutex
	// redirect is the console's address, known once mountd listens.
	redirect string
}

func (c *issuerClient) GetID() string { return c.id }
func (c *issuerClient) RedirectURIs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return []string{c.redirect}
}
func (c *issuerClient) PostLogoutRedirectURIs() []string    { return nil }
func (c *issuerClient) ApplicationType() op.ApplicationType { return op.ApplicationTypeUserAgent }
func (c *issuerClient) AuthMethod() oidc.AuthMethod         { return oidc.AuthMethodNone }
func (c *issuerClient) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}
func (c *issuerClient) LoginURL(id string) string            { return "/login/username?authRequestID=" + id }
func (c *issuerClient) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeJWT }
func (c *issuerClient) IDTokenLifetime() time.Duration       { return time.Hour }
func (c *issuerClient) DevMode() bool                        { return true } // http on 127.0.0.1
func (c *issuerClient) IsScopeAllowed(string) bool           { return false }
func (c *issuerClient) IDTokenUserinfoClaimsAssertion() bool { return false }
func (c *issuerClient) ClockSkew() time.Duration             { return 0 }
func (c *issuerClient) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *issuerClient) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *issuerClient) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeCode, oidc.GrantTypeRefreshToken}
}

// startOtherIssuer serves the example provider on a port of its own.
func startOtherIssuer(t *testing.T, tenant string, grants map[string][]string) (*otherIssuer, string) {
	t.Helper()
	var handler http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	s := &otherIssuer{
		Storage: storage.NewStorage(storage.NewUserStore(srv.URL)),
		client:  &issuerClient{id: "fleet-console"},
		grants:  grants,
		tenant:  tenant,
	}
	handler = exampleop.SetupServer(srv.URL, s, nil, false)
	return s, srv.URL
}

// mint signs an access token with the provider's key, as its
// client-credentials grant would issue one to an operator's server.
func (s *otherIssuer) mint(t *testing.T, issuer string, permissions []string) string {
	t.Helper()
	key, err := s.SigningKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: key.SignatureAlgorithm(), Key: jose.JSONWebKey{Key: key.Key(), KeyID: key.ID()}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	raw, err := jwt.Signed(signer).Claims(jwt.Claims{Issuer: issuer, Subject: "operator-server", Audience: jwt.Audience{"mountd"},
		IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(time.Hour))}).
		Claims(map[string]any{"tenant": s.tenant, "permissions": permissions}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestConsoleAtAnotherIssuer runs the console against an independently
// configured OpenID provider (MOUNTD_ISSUER, MOUNTD_CONSOLE_CLIENT_ID and
// the claim names): people sign in on that provider's login page, the
// fleet and live reports work with its tokens, a restricted person sees its
// mount only, and the page asks nothing of any origin but mountd's and the
// provider's.
func TestConsoleAtAnotherIssuer(t *testing.T) {
	chromium := testenv.Chromium(t)
	owner := []string{"openid", "sub", audItem}
	restricted := []string{"openid", "sub", audItem, "role:restricted", "mount:MNT-0102"}
	// The example provider's two users: test-user@<host> and test-user2.
	issuer, issuerURL := startOtherIssuer(t, "tenant-42", map[string][]string{"id1": owner, "id2": restricted})

	cfg := testConfig(t.TempDir(), "")
	cfg.Issuer, cfg.ConsoleClientID, cfg.AccountClaim, cfg.ScopeClaim = issuerURL, "fleet-console", "tenant", "permissions"
	in := start(t, cfg)
	issuer.client.mu.Lock()
	issuer.client.redirect = in.base + "/console/"
	issuer.client.mu.Unlock()

	api := client.New(in.base, client.StaticToken(issuer.mint(t, issuerURL, owner)))
	for i, uid := range []string{"MNT-0101", "MNT-0102"} {
		associate(t, api, uid)
		reportStates(t, api, uid, 70-i*10, true, time.Now())
	}

	signIn := func(username string) *browserSession {
		b := newBrowserSession(t, chromium)
		b.step("open the console", chromedp.Navigate(in.base+"/"), chromedp.WaitVisible(chromedp.CSS(`#signin`)))
		b.step("go to the provider's login page", chromedp.Click(chromedp.CSS(`#signin`)), chromedp.WaitVisible(chromedp.CSS(`#username`)))
		if loc, err := chromedp.Run(b.ctx, chromedp.Location()); err != nil || !strings.HasPrefix(loc, issuerURL+"/login/") {
			t.Fatalf("the login page is at %q (%v), want the other provider's", loc, err)
		}
		b.step("sign in",
			chromedp.SendKeys(chromedp.CSS(`#username`), username),
			chromedp.SendKeys(chromedp.CSS(`#password`), "verysecure"),
			chromedp.Click(chromedp.CSS(`button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(`#overview`)))
		b.step("open the fleet", chromedp.Click(chromedp.CSS(`#nav a[data-view=fleet]`)), chromedp.WaitVisible(chromedp.CSS(`#fleet`)))
		return b
	}
	row := func(uid string) string { return `document.querySelector('#fleet tr[data-uid="` + uid + `"]')` }

	b := signIn("test-user@127.0.0.1")
	b.waitJS("the fleet lists the tenant's mounts", row("MNT-0101")+` && `+row("MNT-0102")+` !== null`, 10*time.Second)
	b.waitJS("the socket is live", `document.getElementById('connection').dataset.state === 'live'`, 10*time.Second)
	reportStates(t, api, "MNT-0101", 33, false, time.Now())
	b.waitJS("a report appears live", row("MNT-0101")+`.querySelector('.battery').textContent === '33%'`, 5*time.Second)
	b.waitJS("owner actions are offered", `!!document.getElementById('associate-link')`, time.Second)
	b.checkOrigin(in.base, issuerURL)

	r := signIn("test-user2")
	r.waitJS("the restricted person's fleet", `document.querySelectorAll('#fleet tbody tr[data-uid]').length === 1 && `+row("MNT-0102")+` !== null`, 10*time.Second)
	r.waitJS("no owner actions", `!document.getElementById('associate-link')`, time.Second)
	r.checkOrigin(in.base, issuerURL)
}
