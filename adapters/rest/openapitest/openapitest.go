// Package openapitest keeps the REST API's OpenAPI document true: tests hand
// it every request they made and the response they received, and it fails
// the test when the response is not what the document says (an undocumented
// route or status, a missing or extra field, a wrong type, a missing header).
//
// Only the documented part of the listener is checked: paths under /api/v1/
// and /healthz, /readyz. Anything else (the identity provider's /oauth/v2/...,
// /metrics, /graphql) is skipped silently.
package openapitest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/mountd/mountd/adapters/rest"
)

// Validator checks responses against rest.OpenAPIDocument. It is safe for
// concurrent use by parallel tests.
type Validator struct {
	doc    *openapi3.T
	router routers.Router
	// wildcards are the prefixes of paths whose last parameter takes the
	// whole rest of the path, slashes included (x-mountd-path-wildcard).
	wildcards []string
}

// wildcardExtension marks a path item whose last path parameter, named by
// the extension's value, spans several segments, like a ServeMux {name...}.
const wildcardExtension = "x-mountd-path-wildcard"

// The document is parsed and validated once per test binary.
var (
	loadOnce  sync.Once
	loaded    *Validator
	loadError error
)

// New returns the validator of the embedded document; it fails tb when the
// document does not load, is not valid OpenAPI, or cannot be routed.
func New(tb testing.TB) *Validator {
	tb.Helper()
	loadOnce.Do(func() {
		// Failure messages name the place and the reason; kin-openapi would
		// add a dump of the schema and the value (null for the JSON Schema
		// 2020-12 validator's errors), which buries them.
		openapi3.SchemaErrorDetailsDisabled = true
		loaded, loadError = load(rest.OpenAPIDocument())
	})
	if loadError != nil {
		tb.Fatalf("openapitest: %v", loadError)
	}
	return loaded
}

// load parses, validates and routes a document. The servers entry is "/", so
// the router matches on the path alone, whatever the host and port.
func load(data []byte) (*Validator, error) {
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = false
	doc, err := loader.LoadFromData(data)
	if err != nil {
		return nil, fmt.Errorf("load the OpenAPI document: %w", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		return nil, fmt.Errorf("the OpenAPI document is version %q, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("the OpenAPI document is invalid: %w", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route the OpenAPI document: %w", err)
	}
	v := &Validator{doc: doc, router: router}
	for path, item := range doc.Paths.Map() {
		name, ok := item.Extensions[wildcardExtension].(string)
		if !ok {
			continue
		}
		if !strings.HasSuffix(path, "/{"+name+"}") {
			return nil, fmt.Errorf("path %s: %s names %q, which is not its last segment", path, wildcardExtension, name)
		}
		v.wildcards = append(v.wildcards, strings.TrimSuffix(path, "{"+name+"}"))
	}
	return v, nil
}

// Document returns the parsed document (read only).
func (v *Validator) Document() *openapi3.T { return v.doc }

// Checked reports whether Check looks at requests to this path: /api/v1/...,
// /healthz and /readyz.
func Checked(path string) bool {
	return strings.HasPrefix(path, "/api/v1/") || path == "/healthz" || path == "/readyz"
}

// Check validates one exchange: the request's route must be documented, and
// the response's status, headers and body must match the document. body is
// the response body as read by the caller (res.Body is not touched). Failures
// are reported with tb.Errorf.
//
// A request the server itself could not route (a 404 NOT_FOUND or 405
// METHOD_NOT_ALLOWED problem for a path or method it does not serve) is
// accepted when the document does not have the route either, so tests may
// probe unknown routes; any other answer on an undocumented route fails.
func (v *Validator) Check(tb testing.TB, req *http.Request, res *http.Response, body []byte) {
	tb.Helper()
	if req == nil || req.URL == nil || res == nil {
		tb.Errorf("openapitest: Check needs a request with a URL and a response")
		return
	}
	if !Checked(req.URL.Path) {
		return
	}
	// A CORS preflight is answered by the CORS layer, not by an operation.
	if req.Method == http.MethodOptions && req.Header.Get("Access-Control-Request-Method") != "" {
		return
	}
	for _, err := range v.problems(req, res, body) {
		tb.Errorf("openapitest: %s %s answered %d: %v\nbody: %s", req.Method, req.URL.RequestURI(),
			res.StatusCode, err, excerpt(body))
	}
}

// problems returns what is wrong with one exchange.
func (v *Validator) problems(req *http.Request, res *http.Response, body []byte) []error {
	// Route on the path and query alone: the test server's host and port are
	// not in the document (its server is "/").
	method := req.Method
	if method == http.MethodHead {
		method = http.MethodGet // Go's ServeMux answers HEAD with the GET handler
	}
	routed := &http.Request{Method: method, Header: req.Header, Proto: req.Proto,
		URL: &url.URL{Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery}}
	routed = routed.WithContext(context.Background())
	route, pathParams, err := v.router.FindRoute(routed)
	if errors.Is(err, routers.ErrPathNotFound) {
		if alt := v.wildcardRequest(routed); alt != nil {
			if r, p, altErr := v.router.FindRoute(alt); altErr == nil {
				routed, route, pathParams, err = alt, r, p, nil
			}
		}
	}
	if err != nil {
		return v.unrouted(err, res, body)
	}
	if req.Method == http.MethodHead {
		return nil // a HEAD answer has no body to check
	}

	var errs []error
	if ref := route.Operation.Responses.Status(res.StatusCode); ref != nil && ref.Value != nil &&
		len(ref.Value.Content) == 0 && len(body) > 0 {
		errs = append(errs, fmt.Errorf("the document gives status %d no body, but one was sent", res.StatusCode))
	}
	options := &openapi3filter.Options{
		IncludeResponseStatus: true,
		MultiError:            true,
		AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
	}
	options.WithCustomSchemaErrorFunc(schemaErrorMessage)
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request:    routed,
			PathParams: pathParams,
			Route:      route,
			Options:    options,
		},
		Status:  res.StatusCode,
		Header:  res.Header,
		Options: options,
	}
	input.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), input); err != nil {
		errs = append(errs, fmt.Errorf("response does not match %s %s in the OpenAPI document: %w",
			strings.ToUpper(route.Method), route.Path, err))
	}
	return errs
}

// wildcardRequest rewrites a request under a wildcard path so that the rest
// of the path is one escaped segment, as the router matches it; nil when no
// wildcard path applies.
func (v *Validator) wildcardRequest(r *http.Request) *http.Request {
	for _, prefix := range v.wildcards {
		rest, ok := strings.CutPrefix(r.URL.Path, prefix)
		if !ok || rest == "" || !strings.Contains(rest, "/") {
			continue
		}
		u := *r.URL
		u.RawPath = prefix + url.PathEscape(rest) // escapes "/" too
		alt := r.Clone(r.Context())
		alt.URL = &u
		return alt
	}
	return nil
}

// unrouted judges an answer to a route the document does not have: only the
// server's own "no such route" problem is acceptable.
func (v *Validator) unrouted(routeErr error, res *http.Response, body []byte) []error {
	var want int
	var wantCode string
	switch {
	case errors.Is(routeErr, routers.ErrPathNotFound):
		want, wantCode = http.StatusNotFound, "NOT_FOUND"
	case errors.Is(routeErr, routers.ErrMethodNotAllowed):
		want, wantCode = http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED"
	default:
		return []error{fmt.Errorf("routing in the OpenAPI document: %w", routeErr)}
	}
	if res.StatusCode != want {
		return []error{fmt.Errorf("the route is not in the OpenAPI document (%v), yet the server answered it; document it in adapters/rest/openapi.json", routeErr)}
	}
	if err := v.checkProblem(res, body, want, wantCode); err != nil {
		return []error{fmt.Errorf("the answer for a route the server does not serve: %w", err)}
	}
	return nil
}

// checkProblem checks an answer against the document's Problem schema, with
// the given status and code.
func (v *Validator) checkProblem(res *http.Response, body []byte, status int, code string) error {
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		return fmt.Errorf("Content-Type is %q, want application/problem+json", ct)
	}
	ref := v.doc.Components.Schemas["Problem"]
	if ref == nil || ref.Value == nil {
		return errors.New("the document has no Problem schema")
	}
	var value any
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	if err := dec.Decode(&value); err != nil {
		return fmt.Errorf("the body is not JSON: %w", err)
	}
	if err := ref.Value.VisitJSON(value, openapi3.MultiErrors(), openapi3.VisitAsResponse(), openapi3.EnableJSONSchema2020()); err != nil {
		return fmt.Errorf("the body does not match the Problem schema: %w", err)
	}
	var p struct {
		Status int    `json:"status"`
		Code   string `json:"code"`
	}
	_ = json.Unmarshal(body, &p)
	if p.Status != status || p.Code != code {
		return fmt.Errorf("the problem is %d %s, want %d %s", p.Status, p.Code, status, code)
	}
	return nil
}

// schemaErrorMessage is a schema error without the dump of the schema and
// value that kin-openapi adds: where in the body, and what is wrong.
func schemaErrorMessage(err *openapi3.SchemaError) string {
	if err.Origin != nil {
		return "" // kin-openapi's own message carries the origin
	}
	reason := err.Reason
	if reason == "" {
		reason = fmt.Sprintf("does not match the schema's %q", err.SchemaField)
	}
	if ptr := err.JSONPointer(); len(ptr) > 0 {
		return fmt.Sprintf("at %q: %s", "/"+strings.Join(ptr, "/"), reason)
	}
	return reason
}

// excerpt shortens a body for a failure message.
func excerpt(body []byte) string {
	const limit = 600
	if len(body) <= limit {
		return string(body)
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(body[cut]) {
		cut--
	}
	return string(body[:cut]) + fmt.Sprintf("... (%d bytes)", len(body))
}
