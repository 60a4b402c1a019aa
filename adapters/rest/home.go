package rest

import (
	"net/http"
	"strings"

	"github.com/mountd/mountd/core"
)

// home answers GET / for a person in a browser with a page that names the
// service and says where to go; API clients keep the JSON 404 (there is
// no resource at the root).
func (s *Server) home(w http.ResponseWriter, r *http.Request) {
	if !strings.Contains(r.Header.Get("Accept"), "text/html") {
		writeError(w, r, s.Logger, core.Errorf(core.CodeNotFound, "no such resource: %s", r.URL.Path))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	_, _ = w.Write([]byte(homePage))
}

// homePage is static: nothing in it depends on the request.
const homePage = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>mountd</title>
<link rel="icon" href="data:,">
<style>
  body { font-family: system-ui, sans-serif; max-width: 46rem; margin: 3rem auto; padding: 0 1rem; line-height: 1.5; color: #111827; }
  code, pre { background: #f3f4f6; border-radius: 4px; }
  code { padding: 0 4px; }
  pre { padding: .75rem 1rem; overflow-x: auto; }
</style>
</head>
<body>
<h1>mountd</h1>
<p>The Mount Management Service: it associates helmet-lock mounts with operator accounts,
collects their states, signs the commands a phone delivers to them over Bluetooth,
keeps NFC tags in sync and ships firmware.</p>
<ul>
  <li><a href="/graphiql">GraphiQL</a>: explore and try the GraphQL API in the browser.</li>
  <li><a href="/api/v1/openapi.json">OpenAPI description</a> of the REST API under <code>/api/v1</code>.</li>
  <li><a href="/healthz">/healthz</a>, <a href="/readyz">/readyz</a> and <a href="/metrics">/metrics</a> for operations.</li>
</ul>
<h2>First steps</h2>
<p>Create an operator account (its client secret is shown only once), get an access token from
the identity provider at <code>/oauth/v2/token</code>, and send it in <code>Access-Key</code>
(or <code>Authorization: Bearer</code>) with every call:</p>
<pre>./bin/mountd accounts create --name "Demo Fleet" --json | tee account.json
curl -s -X POST http://127.0.0.1:8080/oauth/v2/token -d grant_type=client_credentials \
  -d client_id=CLIENT_ID -d client_secret=CLIENT_SECRET \
  --data-urlencode "scope=openid sub urn:mountd:iam:org:project:id:mountd:aud"
curl -s http://127.0.0.1:8080/api/v1/accounts/me -H "Access-Key: ACCESS_TOKEN"</pre>
<p>The project's README goes on from there: associating a mount, reporting states, signed
commands, NFC tags and firmware.</p>
</body>
</html>
`
