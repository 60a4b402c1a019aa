package rest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/aipfilter"
	"github.com/mountd/mountd/adapters/rest"
	"github.com/mountd/mountd/adapters/rest/openapitest"
	"github.com/mountd/mountd/core"
)

// undocumented lists the routes registered with a literal pattern that are
// deliberately outside the OpenAPI document: they are not REST.
var undocumented = map[string]string{
	"GET /metrics":   "Prometheus text exposition",
	"GET /graphiql":  "an HTML page for GraphQL, not part of the REST API",
	"GET /graphiql/": "the files of that page",
	"GET /{$}":       "redirects to the console",
	"GET /console/":  "the web console, a page for people",
}

// alwaysDocumented lists routes the document must have even before they
// are registered.
var alwaysDocumented = []string{"GET /api/v1/openapi.json"}

func TestOpenAPIDocumentLoadsAndValidates(t *testing.T) {
	v := openapitest.New(t) // fails on a document that is not valid OpenAPI
	doc := v.Document()
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi = %q, want 3.1.0", doc.OpenAPI)
	}
	if !json.Valid(rest.OpenAPIDocument()) {
		t.Fatal("openapi.json is not valid JSON")
	}
	if len(doc.Servers) != 1 || doc.Servers[0].URL != "/" {
		t.Errorf("servers must be the single entry \"/\" so that routing ignores host and port")
	}
	ids := map[string]string{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			where := method + " " + path
			if op.OperationID == "" {
				t.Errorf("%s has no operationId", where)
			} else if other, dup := ids[op.OperationID]; dup {
				t.Errorf("%s and %s share operationId %q", where, other, op.OperationID)
			}
			ids[op.OperationID] = where
			public := op.Security != nil && len(*op.Security) == 0
			if !public && op.Responses.Status(http.StatusUnauthorized) == nil {
				t.Errorf("%s needs a token but does not document 401", where)
			}
			if op.Responses.Status(http.StatusInternalServerError) == nil {
				t.Errorf("%s does not document 500", where)
			}
			if op.Responses.Default() != nil {
				t.Errorf("%s has a default response: undocumented statuses would pass", where)
			}
		}
	}
}

// unenforced lists JSON Schema 2020-12 keywords that kin-openapi v0.144.0
// does not enforce on responses: a schema holding a $ref anywhere is checked
// by its OpenAPI 3.0-style validator (the 2020-12 validator cannot resolve
// the reference and falls back silently), which ignores these. The document
// must not rely on them; "format" is not asserted either, so date-times
// carry a pattern.
var unenforced = []string{"unevaluatedProperties", "unevaluatedItems", "dependentRequired", "dependentSchemas",
	"prefixItems", "contains", "minContains", "maxContains", "if", "then", "else", "$defs", "$dynamicRef", "patternProperties", "propertyNames"}

func TestOpenAPIDocumentUsesEnforcedKeywords(t *testing.T) {
	var doc any
	if err := json.Unmarshal(rest.OpenAPIDocument(), &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(at string, v any, namesOnly bool)
	walk = func(at string, v any, namesOnly bool) {
		switch v := v.(type) {
		case map[string]any:
			for k, child := range v {
				if !namesOnly && slices.Contains(unenforced, k) {
					t.Errorf("%s/%s: kin-openapi does not enforce %q on schemas with references; express it otherwise", at, k, k)
				}
				// The keys of properties (and of other name maps) are names, not keywords.
				walk(at+"/"+k, child, !namesOnly && (k == "properties" || k == "paths" || k == "schemas" ||
					k == "responses" || k == "parameters" || k == "headers" || k == "content"))
			}
		case []any:
			for i, child := range v {
				walk(fmt.Sprintf("%s/%d", at, i), child, false)
			}
		}
	}
	walk("#", doc, false)
}

// registeredRoutes reads the package's and the listener's non-test sources
// and returns every pattern of the form "METHOD /path" given as a string
// literal to a Handle or HandleFunc call: a route added without
// documentation fails TestOpenAPIDocumentsEveryRoute.
func registeredRoutes(t *testing.T) []string {
	t.Helper()
	// The listener's own routes (metrics, GraphiQL) are registered where
	// the transports are put together.
	var files []string
	for _, dir := range []string{".", "../../app"} {
		found, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, found...)
	}
	pattern := regexp.MustCompile(`^([A-Z]+) (/\S*)$`)
	fset := token.NewFileSet()
	var routes []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc") {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			if m := pattern.FindStringSubmatch(s); m != nil {
				routes = append(routes, m[1]+" "+m[2])
			}
			return true
		})
	}
	return routes
}

// openAPIPath turns a ServeMux path pattern into an OpenAPI path template. A
// {name...} wildcard becomes {name}, which the document marks with
// x-mountd-path-wildcard.
func openAPIPath(muxPath string) string {
	p := strings.TrimSuffix(muxPath, "{$}")
	return strings.ReplaceAll(p, "...}", "}")
}

func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	doc := openapitest.New(t).Document()
	routes := registeredRoutes(t)
	// A parser that finds nothing would make this test pass vacuously.
	for _, want := range []string{"GET /healthz", "GET /api/v1/mounts", "DELETE /api/v1/mounts/{uid}/abandon", "GET /metrics"} {
		if !slices.Contains(routes, want) {
			t.Fatalf("the route parser did not find %q in the package sources (found %v)", want, routes)
		}
	}
	registered := map[string]bool{}
	for _, r := range append(routes, alwaysDocumented...) {
		if _, skip := undocumented[r]; skip {
			continue
		}
		method, path, _ := strings.Cut(r, " ")
		registered[method+" "+openAPIPath(path)] = true
		item := doc.Paths.Value(openAPIPath(path))
		if item == nil || item.GetOperation(method) == nil {
			t.Errorf("route %q is registered but not documented in openapi.json", r)
		}
	}
	// The document describes nothing the server does not serve.
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if r := method + " " + path; !registered[r] {
				t.Errorf("openapi.json documents %q, which no handler serves", r)
			}
		}
	}
}

// recordingTB collects what Validator.Check reports instead of failing.
type recordingTB struct {
	testing.TB
	errs []string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recordingTB) Error(args ...any) { r.errs = append(r.errs, fmt.Sprint(args...)) }

// exchange is a hand-made request and response.
type exchange struct {
	name   string
	method string
	path   string
	status int
	header map[string]string
	body   string
}

func (e exchange) check(t *testing.T, v *openapitest.Validator) []string {
	t.Helper()
	req := httptest.NewRequest(e.method, "http://127.0.0.1:39999"+e.path, nil)
	res := &http.Response{StatusCode: e.status, Header: http.Header{}}
	for k, val := range e.header {
		res.Header.Set(k, val)
	}
	rec := &recordingTB{TB: t}
	v.Check(rec, req, res, []byte(e.body))
	return rec.errs
}

const (
	jsonCT    = "application/json"
	problemCT = "application/problem+json"
)

var (
	sampleMount = map[string]any{
		"uid": "M1", "name": "Front", "serialNumber": "SN1", "macAddress": "AA:BB:CC:DD:EE:FF",
		"firmwareRevision": "1.0.0", "softwareRevision": "1.2.0", "modelNumber": "HM-1",
		"associationState": "ASSOCIATED", "mountLocked": true, "helmetMounted": nil,
		"batteryLevel": 87, "cpuTemperature": nil, "associatedAt": "2026-11-22T01:40:13.123Z",
		"devicePublicKey": strings.Repeat("2e", 32),
		"lastSeenAt":      "2026-11-22T01:41:00.000Z", "presence": "ONLINE", "offline": nil,
	}
	sampleRule = map[string]any{
		"id": "alr_1", "name": "Battery low", "severity": "WARNING",
		"conditions": []any{map[string]any{"code": "BATTERY_LEVEL", "op": "<", "value": "20"}, map[string]any{"presence": "OFFLINE"}},
		"forSeconds": 600, "mountUids": []string{}, "enabled": true,
		"createdAt": "2026-11-22T01:40:13.123Z", "updatedAt": "2026-11-22T01:40:13.123Z",
	}
	sampleAlarm = map[string]any{
		"id": "alm_1", "ruleId": "alr_1", "ruleName": "Battery low", "uid": "M1", "severity": "WARNING", "state": "ACTIVE",
		"raisedAt": "2026-11-22T01:50:13.123Z", "clearedAt": nil, "acknowledgedAt": nil, "acknowledgedBy": nil, "acknowledgedByName": nil,
		"values": map[string]any{"BATTERY_LEVEL": "15", "MOUNT_LOCKED": "1"},
	}
	nonce       = strings.Repeat("0a", 16)
	publicKey   = strings.Repeat("1f", 32)
	signature   = strings.Repeat("c3", 64)
	sampleOwner = map[string]any{
		"id":     nonce,
		"status": "ISSUED", "statusAt": nil, "reason": nil, "verified": false,
		"code":        "ASSOCIATE_OWNER",
		"data":        map[string]any{"accountId": "acc-1", "publicKey": publicKey, "expiresAt": "2026-11-22T01:45:13.123Z"},
		"generatedAt": "2026-11-22T01:40:13.123Z",
		"payload":     "1795311613123;ASSOCIATE_OWNER;M1;accountId=acc-1,publicKey=" + publicKey + ";" + nonce,
		"signedToken": nil,
	}
	sampleRelease = map[string]any{
		"id":     nonce,
		"status": "REFUSED", "statusAt": "2026-11-22T01:41:00.000Z", "reason": "helmet not mounted", "verified": true,
		"code":        "RELEASE_HELMET",
		"data":        map[string]any{"expiresAt": "2026-11-22T01:45:13.123Z"},
		"generatedAt": "2026-11-22T01:40:13.123Z",
		"payload":     "1795311613123;RELEASE_HELMET;M1;;" + nonce,
		"signedToken": signature,
	}
	samplePagination = map[string]any{"currentPage": 1, "pageSize": 20, "totalItems": 1, "totalPages": 1}
	sampleTag        = map[string]any{"uid": "04A1B2C3D4E5F6", "name": "Badge", "color": "#FF8800", "iconName": "badge",
		"mountUids": []string{"M1"}, "createdAt": "2026-11-22T01:40:13.123Z", "updatedAt": "2026-11-22T01:40:13.123Z"}
	sampleFirmware = map[string]any{"softwareRevision": "1.3.0", "modelNumber": "HM-1", "availableSince": "2026-11-01T00:00:00.000Z",
		"deprecated": false, "mandatory": true, "sha256": strings.Repeat("ab", 32), "size": 524288}
	sampleJob = map[string]any{
		"id": "job_1", "code": "CONFIGURE_ALARM", "params": map[string]any{"alarmMode": "ON", "alarmSensitivity": "LOW", "alarmVolume": "HIGH"},
		"filter": "batteryLevel < 20", "description": "", "state": "COMPLETED",
		"createdAt": "2026-11-22T01:40:13.123Z", "expiresAt": "2026-11-29T01:40:13.123Z", "targets": 3,
		"counts": map[string]any{"pending": 0, "issued": 0, "executed": 2, "refused": 1, "unconfirmed": 0},
	}
	sampleRollout = map[string]any{
		"id": "ro_1", "modelNumber": "HM-1", "softwareRevision": "1.3.0", "filter": "", "phases": []int{1, 10, 50, 100},
		"failureThreshold": 5, "minSample": 10, "healthWindow": "1h0m0s", "requireIdle": true, "state": "RUNNING",
		"pausedReason": nil, "openPhase": 1, "targets": 40,
		"counts":    map[string]any{"pending": 20, "eligible": 3, "installing": 1, "healthy": 15, "failed": 1},
		"createdAt": "2026-11-22T01:40:13.123Z", "endedAt": nil,
	}
	sampleRolloutTarget = map[string]any{"uid": "M1", "state": "INSTALLING", "phase": 0, "commandId": nonce,
		"installingSince": "2026-11-22T01:41:00.000Z", "reason": nil}
	sampleInstall = map[string]any{
		"id": nonce, "status": "ISSUED", "statusAt": "2026-11-22T01:40:13.123Z", "reason": nil, "verified": false,
		"code": "INSTALL_FIRMWARE",
		"data": map[string]any{"revision": "1.3.0", "sha256": strings.Repeat("ab", 32), "size": "524288",
			"expiresAt": "2026-11-22T01:45:13.123Z"},
		"generatedAt": "2026-11-22T01:40:13.123Z",
		"payload":     "1795311613123;INSTALL_FIRMWARE;M1;revision=1.3.0,sha256=" + strings.Repeat("ab", 32) + ",size=524288;" + nonce,
		"signedToken": signature,
	}
	blobPath = "/api/v1/firmware/blobs/firmware/HM-1/1.3.0-a1b2c3.bin?expires=1795312513&signature=" + strings.Repeat("9f", 32)
)

// with returns a copy of m with the given changes; a nil value deletes.
func with(m map[string]any, changes ...any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(changes); i += 2 {
		k := changes[i].(string)
		if changes[i+1] == del {
			delete(out, k)
			continue
		}
		out[k] = changes[i+1]
	}
	return out
}

type deletion struct{}

var del = deletion{}

func js(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func problem(status int, code string, extra ...any) string {
	p := map[string]any{"type": "about:blank", "title": http.StatusText(status), "status": status, "code": code, "detail": "something"}
	return js(with(p, extra...))
}

func TestOpenAPIValidatorAcceptsDocumentedResponses(t *testing.T) {
	v := openapitest.New(t)
	ct := map[string]string{"Content-Type": jsonCT}
	pct := map[string]string{"Content-Type": problemCT}
	accepted := []exchange{
		{"mount array", "GET", "/api/v1/mounts/M1", 200, ct, js([]any{sampleMount})},
		{"mount with nulls", "PATCH", "/api/v1/mounts/M1", 200, ct, js([]any{with(sampleMount,
			"mountLocked", nil, "batteryLevel", nil, "associatedAt", nil, "associationState", "IDLE", "macAddress", "")})},
		{"confirmed mount", "POST", "/api/v1/mounts/M1/confirm-association", 200, ct, js(sampleMount)},
		{"mount list", "GET", "/api/v1/mounts?currentPage=1&pageSize=20", 200, ct,
			js(map[string]any{"mounts": []any{sampleMount}, "pagination": samplePagination})},
		{"empty page", "GET", "/api/v1/mounts?currentPage=9", 200, ct,
			js(map[string]any{"mounts": []any{}, "pagination": with(samplePagination, "currentPage", 9)})},
		{"association", "POST", "/api/v1/mounts", 200, ct, js([]any{sampleOwner})},
		{"query", "GET", "/api/v1/mounts/M1/query?code=RELEASE_HELMET", 200, ct, js([]any{sampleRelease})},
		{"audit", "GET", "/api/v1/mounts/M1/commands", 200, ct, js(map[string]any{
			"commands":   []any{with(sampleRelease, "issuedBy", "client-1"), with(sampleOwner, "issuedBy", "client-1")},
			"pagination": samplePagination})},
		{"report", "POST", "/api/v1/mounts/M1/states", 200, ct, `{"accepted":3,"duplicates":1}`},
		{"history", "GET", "/api/v1/mounts/M1/states?code=BATTERY_LEVEL", 200, ct, js(map[string]any{
			"states": []any{map[string]any{"code": "BATTERY_LEVEL", "value": "87.4",
				"occurredAt": "2026-11-22T01:40:13.000Z", "receivedAt": "2026-11-22T01:40:14.456Z", "verified": true}},
			"pagination": samplePagination})},
		{"mount without a device key", "GET", "/api/v1/mounts/M1", 200, ct, js([]any{with(sampleMount, "devicePublicKey", nil)})},
		{"one command", "GET", "/api/v1/mounts/M1/commands/" + nonce, 200, ct, js(with(sampleRelease, "issuedBy", "client-1"))},
		{"no such command", "GET", "/api/v1/mounts/M1/commands/x", 404, pct, problem(404, "COMMAND_NOT_FOUND")},
		{"receipts", "POST", "/api/v1/mounts/M1/commands/receipts", 200, ct, `{"accepted":2,"duplicates":1}`},
		{"receipt for no command", "POST", "/api/v1/mounts/M1/commands/receipts", 404, pct, problem(404, "COMMAND_NOT_FOUND")},
		{"receipt unsigned", "POST", "/api/v1/mounts/M1/commands/receipts", 403, pct, problem(403, "SIGNATURE_REQUIRED")},
		{"receipt badly signed", "POST", "/api/v1/mounts/M1/commands/receipts", 400, pct, problem(400, "INVALID_SIGNATURE")},
		{"receipt shape", "POST", "/api/v1/mounts/M1/commands/receipts", 400, pct, problem(400, "VALIDATION_FAILED",
			"errors", []any{map[string]any{"field": "receipts[0].at", "message": "is required"}})},
		{"report unsigned", "POST", "/api/v1/mounts/M1/states", 403, pct, problem(403, "SIGNATURE_REQUIRED")},
		{"report badly signed", "POST", "/api/v1/mounts/M1/states", 400, pct, problem(400, "INVALID_SIGNATURE")},
		{"receipt event", "GET", "/api/v1/events", 200, ct, js(map[string]any{"events": []any{map[string]any{
			"id": strings.Repeat("e", 32), "type": "COMMAND_EXECUTED", "uid": "M1", "occurredAt": "2026-11-22T01:41:00.000Z", "mount": sampleMount,
			"command": with(sampleRelease, "status", "EXECUTED", "reason", nil)}}, "next": strings.Repeat("e", 32)})},
		{"mount never seen", "GET", "/api/v1/mounts/M1", 200, ct, js([]any{with(sampleMount, "lastSeenAt", nil, "presence", "UNKNOWN")})},
		{"mount told offline", "GET", "/api/v1/mounts/M1", 200, ct, js([]any{with(sampleMount, "offline",
			map[string]any{"revocationVersion": 1795311613123, "logPending": 0, "timeTrusted": true, "at": "2026-11-22T01:41:00.000Z"})})},
		{"rule created", "POST", "/api/v1/alarm-rules", 201, ct, js(sampleRule)},
		{"rule list", "GET", "/api/v1/alarm-rules", 200, ct, js(map[string]any{"rules": []any{sampleRule}, "pagination": samplePagination})},
		{"rule patched", "PATCH", "/api/v1/alarm-rules/alr_1", 200, ct, js(with(sampleRule, "enabled", false, "mountUids", []string{"M1"}))},
		{"rule deleted", "DELETE", "/api/v1/alarm-rules/alr_1", 204, nil, ""},
		{"no such rule", "GET", "/api/v1/alarm-rules/alr_9", 404, pct, problem(404, "ALARM_RULE_NOT_FOUND")},
		{"suggested rules", "GET", "/api/v1/alarm-rules/suggested", 200, ct, js(map[string]any{"rules": []any{
			map[string]any{"name": "Offline", "severity": "WARNING", "conditions": []any{map[string]any{"presence": "OFFLINE"}}, "forSeconds": 0, "mountUids": []string{}}}})},
		{"alarm list", "GET", "/api/v1/alarms?state=ACTIVE", 200, ct, js(map[string]any{"alarms": []any{sampleAlarm,
			with(sampleAlarm, "state", "CLEARED", "clearedAt", "2026-11-22T02:00:00.000Z", "acknowledgedAt", "2026-11-22T01:55:00.000Z", "acknowledgedBy", "usr_1")},
			"pagination": samplePagination})},
		{"acknowledged", "POST", "/api/v1/alarms/alm_1/acknowledge", 200, ct, js(with(sampleAlarm, "acknowledgedAt", "2026-11-22T01:55:00.000Z", "acknowledgedBy", "usr_1", "acknowledgedByName", "ana"))},
		{"no such alarm", "POST", "/api/v1/alarms/alm_9/acknowledge", 404, pct, problem(404, "ALARM_NOT_FOUND")},
		{"alarm event", "GET", "/api/v1/events", 200, ct, js(map[string]any{"events": []any{map[string]any{
			"id": strings.Repeat("e", 32), "type": "ALARM_RAISED", "uid": "M1", "occurredAt": "2026-11-22T01:50:13.123Z", "mount": sampleMount,
			"alarm": sampleAlarm}}, "next": strings.Repeat("e", 32)})},
		{"job created", "POST", "/api/v1/jobs", 201, ct, js(with(sampleJob, "state", "ACTIVE", "filter", ""))},
		{"job list", "GET", "/api/v1/jobs", 200, ct, js(map[string]any{"jobs": []any{sampleJob}, "pagination": samplePagination})},
		{"job", "GET", "/api/v1/jobs/job_1", 200, ct, js(sampleJob)},
		{"job mounts", "GET", "/api/v1/jobs/job_1/mounts", 200, ct, js(map[string]any{"mounts": []any{
			map[string]any{"uid": "M1", "status": "PENDING", "commandId": nil}, map[string]any{"uid": "M2", "status": "EXECUTED", "commandId": nonce}},
			"pagination": samplePagination})},
		{"job canceled", "POST", "/api/v1/jobs/job_1/cancel", 200, ct, js(with(sampleJob, "state", "CANCELED"))},
		{"job not active", "POST", "/api/v1/jobs/job_1/cancel", 409, pct, problem(409, "CONFLICT")},
		{"no such job", "GET", "/api/v1/jobs/job_9", 404, pct, problem(404, "JOB_NOT_FOUND")},
		{"pending commands", "GET", "/api/v1/mounts/M1/pending-commands", 200, ct, js(map[string]any{"commands": []any{
			with(sampleRelease, "status", "ISSUED", "statusAt", "2026-11-22T01:40:13.123Z", "reason", nil, "verified", false, "jobId", "job_1")}})},
		{"no pending commands", "GET", "/api/v1/mounts/M1/pending-commands", 200, ct, `{"commands":[]}`},
		{"job's command in the audit", "GET", "/api/v1/mounts/M1/commands", 200, ct, js(map[string]any{
			"commands": []any{with(sampleRelease, "issuedBy", "client-1", "jobId", "job_1")}, "pagination": samplePagination})},
		{"job event", "GET", "/api/v1/events?types=JOB_COMPLETED", 200, ct, js(map[string]any{"events": []any{map[string]any{
			"id": strings.Repeat("e", 32), "type": "JOB_COMPLETED", "uid": nil, "occurredAt": "2026-11-22T01:50:13.123Z", "mount": nil,
			"job": sampleJob}}, "next": strings.Repeat("e", 32)})},
		{"me", "GET", "/api/v1/accounts/me", 200, ct, js(map[string]any{"accountId": "acc-1", "name": "Fleet",
			"role": "restricted", "mountUids": []string{"M1"}, "scopes": []string{"openid", "sub"}, "expiresAt": "2026-11-22T02:40:13.000Z"})},
		{"delete", "DELETE", "/api/v1/mounts/M1", 204, nil, ""},
		{"abandon", "DELETE", "/api/v1/mounts/M1/abandon", 204, nil, ""},
		{"validation problem", "POST", "/api/v1/mounts", 400, pct, problem(400, "VALIDATION_FAILED",
			"errors", []any{map[string]any{"field": "macAddress", "message": "must be six colon-separated hexadecimal byte pairs"}})},
		{"401", "GET", "/api/v1/mounts", 401, map[string]string{"Content-Type": problemCT, "WWW-Authenticate": `Bearer realm="mountd"`},
			problem(401, "UNAUTHENTICATED")},
		{"403 scope", "GET", "/api/v1/accounts/me", 403, pct, problem(403, "INSUFFICIENT_SCOPE")},
		{"404 mount", "GET", "/api/v1/mounts/M9", 404, pct, problem(404, "MOUNT_NOT_FOUND")},
		{"409", "POST", "/api/v1/mounts", 409, pct, problem(409, "MOUNT_ALREADY_OWNED")},
		{"410", "POST", "/api/v1/mounts/M1/confirm-association", 410, pct, problem(410, "ASSOCIATION_EXPIRED")},
		{"413", "POST", "/api/v1/mounts/M1/states", 413, pct, problem(413, "PAYLOAD_TOO_LARGE")},
		{"429", "GET", "/api/v1/mounts", 429, map[string]string{"Content-Type": problemCT, "Retry-After": "5"}, problem(429, "RATE_LIMITED")},
		{"500 without detail", "GET", "/api/v1/mounts", 500, pct, problem(500, "INTERNAL", "detail", del)},
		{"503", "GET", "/api/v1/mounts", 503, map[string]string{"Content-Type": problemCT, "Retry-After": "5"}, problem(503, "UNAVAILABLE")},
		{"tag list", "GET", "/api/v1/nfc-tags", 200, ct, js(map[string]any{"tags": []any{sampleTag,
			with(sampleTag, "color", "", "iconName", "", "name", "", "mountUids", []string{})}, "pagination": samplePagination})},
		{"tag sync", "POST", "/api/v1/nfc-tags", 200, ct, `{"message":"NFC tags synchronised","mountUid":"M1","added":2,"removed":0}`},
		{"tag update", "PATCH", "/api/v1/nfc-tags/04:a1:b2:c3", 200, ct, js(map[string]any{"message": "NFC tag updated", "tag": sampleTag})},
		{"tag not found", "PATCH", "/api/v1/nfc-tags/04A1B2C3", 404, pct, problem(404, "NFC_TAG_NOT_FOUND")},
		{"firmware list", "GET", "/api/v1/firmware/versions?modelNumber=HM-1", 200, ct, js(map[string]any{
			"versions": []any{sampleFirmware, with(sampleFirmware, "deprecated", true, "mandatory", false)}, "pagination": samplePagination})},
		{"up to date", "GET", "/api/v1/firmware/check-update?modelNumber=HM-1&softwareRevision=1.3.0", 200, ct, `{"code":"UP_TO_DATE"}`},
		{"update available", "GET", "/api/v1/firmware/check-update?modelNumber=HM-1", 200, ct,
			js(map[string]any{"code": "UPDATE_AVAILABLE", "version": sampleFirmware})},
		{"rollout created", "POST", "/api/v1/rollouts", 201, ct, js(with(sampleRollout, "openPhase", 0))},
		{"rollout list", "GET", "/api/v1/rollouts", 200, ct, js(map[string]any{"rollouts": []any{sampleRollout}, "pagination": samplePagination})},
		{"rollout", "GET", "/api/v1/rollouts/ro_1", 200, ct, js(with(sampleRollout, "filter", `name = "x"`))},
		{"rollout mounts", "GET", "/api/v1/rollouts/ro_1/mounts", 200, ct, js(map[string]any{"mounts": []any{sampleRolloutTarget,
			map[string]any{"uid": "M2", "state": "PENDING", "phase": 2, "commandId": nil, "installingSince": nil, "reason": nil},
			with(sampleRolloutTarget, "state", "FAILED", "reason", "refused: bad image")}, "pagination": samplePagination})},
		{"rollout paused", "POST", "/api/v1/rollouts/ro_1/pause", 200, ct, js(with(sampleRollout, "state", "PAUSED", "pausedReason", "MANUAL"))},
		{"rollout resumed", "POST", "/api/v1/rollouts/ro_1/resume", 200, ct, js(sampleRollout)},
		{"rollout canceled", "POST", "/api/v1/rollouts/ro_1/cancel", 200, ct, js(with(sampleRollout, "state", "CANCELED", "endedAt", "2026-11-23T00:00:00.000Z"))},
		{"rollout in the wrong state", "POST", "/api/v1/rollouts/ro_1/resume", 409, pct, problem(409, "CONFLICT")},
		{"no such rollout", "GET", "/api/v1/rollouts/ro_9", 404, pct, problem(404, "ROLLOUT_NOT_FOUND")},
		{"rollout event", "GET", "/api/v1/events", 200, ct, js(map[string]any{"events": []any{map[string]any{
			"id": strings.Repeat("e", 32), "type": "ROLLOUT_PAUSED", "uid": nil, "occurredAt": "2026-11-22T01:50:13.123Z", "mount": nil,
			"rollout": with(sampleRollout, "state", "PAUSED", "pausedReason", "FAILURE_THRESHOLD")}}, "next": strings.Repeat("e", 32)})},
		{"install firmware query", "GET", "/api/v1/mounts/M1/query?code=INSTALL_FIRMWARE&revision=1.3.0", 200, ct, js([]any{sampleInstall})},
		{"install firmware pending", "GET", "/api/v1/mounts/M1/pending-commands", 200, ct, js(map[string]any{"commands": []any{
			with(sampleInstall, "rolloutId", "ro_1")}})},
		{"mount's update", "GET", "/api/v1/firmware/check-update?modelNumber=HM-1&mountUid=M1", 200, ct,
			js(map[string]any{"code": "UPDATE_AVAILABLE", "version": sampleFirmware})},
		{"no such mount for an update", "GET", "/api/v1/firmware/check-update?modelNumber=HM-1&mountUid=M9", 404, pct, problem(404, "MOUNT_NOT_FOUND")},
		{"mandatory update", "GET", "/api/v1/firmware/check-update?modelNumber=HM-1&softwareRevision=1.0.0", 200, ct,
			js(map[string]any{"code": "MANDATORY_UPDATE", "version": sampleFirmware})},
		{"no firmware", "GET", "/api/v1/firmware/check-update?modelNumber=XX", 404, pct, problem(404, "FIRMWARE_NOT_FOUND")},
		{"download", "GET", "/api/v1/firmware/download?modelNumber=HM-1", 200, ct, js(map[string]any{"version": sampleFirmware,
			"downloadLink": "http://127.0.0.1:8080" + blobPath, "expiresAt": "2026-11-22T01:55:13.000Z"})},
		{"blob", "GET", blobPath, 200, map[string]string{"Content-Type": "application/octet-stream", "ETag": `"0123abcd"`}, "\x7fELF"},
		{"blob range", "GET", blobPath, 206, map[string]string{"Content-Type": "application/octet-stream", "ETag": `"0123abcd"`}, "EL"},
		{"blob bad range", "GET", blobPath, 416, map[string]string{"Content-Type": "text/plain; charset=utf-8"}, "invalid range"},
		{"blob tampered", "GET", blobPath + "0", 403, pct, problem(403, "FORBIDDEN")},
		{"blob gone", "GET", blobPath, 404, pct, problem(404, "FIRMWARE_NOT_FOUND")},
		{"healthz", "GET", "/healthz", 200, ct, `{"status":"ok"}`},
		{"readyz", "GET", "/readyz", 200, ct, `{"status":"ok","checks":{"database":"ok"}}`},
		{"degraded", "GET", "/readyz", 200, ct, `{"status":"degraded","checks":{"database":"ok","redis":"degraded"}}`},
		{"not ready", "GET", "/readyz", 503, map[string]string{"Content-Type": jsonCT, "Retry-After": "5"},
			`{"status":"unavailable","checks":{"database":"unavailable"}}`},
		{"server's 404 for an unknown route", "GET", "/api/v1/nowhere", 404, pct, problem(404, "NOT_FOUND")},
		{"server's 405 for an unknown method", "PUT", "/api/v1/mounts", 405, pct, problem(405, "METHOD_NOT_ALLOWED")},
		{"outside the API", "POST", "/oauth/v2/token", 200, map[string]string{"Content-Type": "text/plain"}, "anything"},
		{"metrics", "GET", "/metrics", 200, map[string]string{"Content-Type": "text/plain"}, "# HELP"},
	}
	for _, e := range accepted {
		if errs := e.check(t, v); len(errs) > 0 {
			t.Errorf("%s: rejected a documented response:\n%s", e.name, strings.Join(errs, "\n"))
		}
	}
	// End-to-end tests run in parallel and share the validator.
	var wg sync.WaitGroup
	for range 4 {
		for _, e := range accepted {
			wg.Go(func() {
				if errs := e.check(t, v); len(errs) > 0 {
					t.Errorf("%s (concurrent): %s", e.name, strings.Join(errs, "\n"))
				}
			})
		}
	}
	wg.Wait()
}

func TestOpenAPIValidatorRejectsWrongResponses(t *testing.T) {
	v := openapitest.New(t)
	ct := map[string]string{"Content-Type": jsonCT}
	pct := map[string]string{"Content-Type": problemCT}
	for _, e := range []exchange{
		{"mount missing a field", "GET", "/api/v1/mounts/M1", 200, ct, js([]any{with(sampleMount, "name", del)})},
		{"mount with a wrong type", "GET", "/api/v1/mounts/M1", 200, ct, js([]any{with(sampleMount, "batteryLevel", "87")})},
		{"null boolean missing", "GET", "/api/v1/mounts/M1", 200, ct, js([]any{with(sampleMount, "helmetMounted", del)})},
		{"fractional battery", "GET", "/api/v1/mounts/M1", 200, ct, js([]any{with(sampleMount, "batteryLevel", 87.5)})},
		{"unknown state", "GET", "/api/v1/mounts/M1", 200, ct, js([]any{with(sampleMount, "associationState", "PAIRED")})},
		{"extra field", "GET", "/api/v1/mounts/M1", 200, ct, js([]any{with(sampleMount, "ownerId", "acc-1")})},
		{"time without milliseconds", "GET", "/api/v1/mounts/M1", 200, ct, js([]any{with(sampleMount, "associatedAt", "2026-11-22T01:40:13Z")})},
		{"time not in UTC", "GET", "/api/v1/mounts/M1", 200, ct, js([]any{with(sampleMount, "associatedAt", "2026-11-22T02:40:13.123+01:00")})},
		{"object instead of array", "GET", "/api/v1/mounts/M1", 200, ct, js(sampleMount)},
		{"array instead of object", "POST", "/api/v1/mounts/M1/confirm-association", 200, ct, js([]any{sampleMount})},
		{"list without pagination", "GET", "/api/v1/mounts", 200, ct, js(map[string]any{"mounts": []any{sampleMount}})},
		{"undocumented status", "GET", "/api/v1/mounts/M1", 202, ct, js([]any{sampleMount})},
		{"undocumented error status", "GET", "/api/v1/mounts/M1", 410, pct, problem(410, "ASSOCIATION_EXPIRED")},
		{"200 for a delete", "DELETE", "/api/v1/mounts/M1", 200, ct, "{}"},
		{"body on a 204", "DELETE", "/api/v1/mounts/M1/abandon", 204, ct, "{}"},
		{"command without expiresAt", "POST", "/api/v1/mounts", 200, ct, js([]any{with(sampleOwner,
			"data", map[string]any{"accountId": "acc-1", "publicKey": publicKey})})},
		{"issuedBy outside the audit", "GET", "/api/v1/mounts/M1/query?code=RELEASE_HELMET", 200, ct,
			js([]any{with(sampleRelease, "issuedBy", "client-1")})},
		{"short signature", "GET", "/api/v1/mounts/M1/query?code=RELEASE_HELMET", 200, ct,
			js([]any{with(sampleRelease, "signedToken", "abcd")})},
		{"mount without devicePublicKey", "GET", "/api/v1/mounts/M1", 200, ct, js([]any{with(sampleMount, "devicePublicKey", del)})},
		{"command without status", "GET", "/api/v1/mounts/M1/query?code=RELEASE_HELMET", 200, ct, js([]any{with(sampleRelease, "status", del)})},
		{"unknown command status", "GET", "/api/v1/mounts/M1/commands/x", 200, ct, js(with(sampleRelease, "status", "DONE"))},
		{"one command as an array", "GET", "/api/v1/mounts/M1/commands/x", 200, ct, js([]any{sampleRelease})},
		{"state without verified", "GET", "/api/v1/mounts/M1/states", 200, ct, js(map[string]any{"states": []any{map[string]any{
			"code": "BATTERY_LEVEL", "value": "87.4", "occurredAt": "2026-11-22T01:40:13.000Z", "receivedAt": "2026-11-22T01:40:14.456Z"}},
			"pagination": samplePagination})},
		{"signature problem on a mount read", "GET", "/api/v1/mounts/M1", 400, pct, problem(400, "INVALID_SIGNATURE")},
		{"receipt result as text", "POST", "/api/v1/mounts/M1/commands/receipts", 200, ct, `{"accepted":"2","duplicates":0}`},
		{"report as text", "POST", "/api/v1/mounts/M1/states", 200, ct, `{"accepted":"3","duplicates":1}`},
		{"json error instead of problem", "GET", "/api/v1/mounts/M9", 404, ct, problem(404, "MOUNT_NOT_FOUND")},
		{"problem without code", "GET", "/api/v1/mounts/M9", 404, pct, problem(404, "MOUNT_NOT_FOUND", "code", del)},
		{"problem with another status's code", "GET", "/api/v1/mounts/M9", 404, pct, problem(404, "FORBIDDEN")},
		{"problem status differs from HTTP", "GET", "/api/v1/mounts/M9", 404, pct, problem(400, "MOUNT_NOT_FOUND")},
		{"field error without message", "POST", "/api/v1/mounts", 400, pct, problem(400, "VALIDATION_FAILED",
			"errors", []any{map[string]any{"field": "uid"}})},
		{"401 without WWW-Authenticate", "GET", "/api/v1/mounts", 401, pct, problem(401, "UNAUTHENTICATED")},
		{"503 without Retry-After", "GET", "/api/v1/mounts", 503, pct, problem(503, "UNAVAILABLE")},
		{"tag without mountUids", "GET", "/api/v1/nfc-tags", 200, ct, js(map[string]any{
			"tags": []any{with(sampleTag, "mountUids", del)}, "pagination": samplePagination})},
		{"tag uid in lower case", "PATCH", "/api/v1/nfc-tags/04a1b2c3", 200, ct, js(map[string]any{"message": "NFC tag updated",
			"tag": with(sampleTag, "uid", "04a1b2c3")})},
		{"sync count as text", "POST", "/api/v1/nfc-tags", 200, ct, `{"message":"NFC tags synchronised","mountUid":"M1","added":"2","removed":0}`},
		{"up to date with a version", "GET", "/api/v1/firmware/check-update?modelNumber=HM-1", 200, ct,
			js(map[string]any{"code": "UP_TO_DATE", "version": sampleFirmware})},
		{"update without a version", "GET", "/api/v1/firmware/check-update?modelNumber=HM-1", 200, ct, `{"code":"UPDATE_AVAILABLE"}`},
		{"unknown update code", "GET", "/api/v1/firmware/check-update?modelNumber=HM-1", 200, ct, `{"code":"MAYBE"}`},
		{"firmware without sha256", "GET", "/api/v1/firmware/versions", 200, ct, js(map[string]any{
			"versions": []any{with(sampleFirmware, "sha256", del)}, "pagination": samplePagination})},
		{"relative download link", "GET", "/api/v1/firmware/download?modelNumber=HM-1", 200, ct, js(map[string]any{
			"version": sampleFirmware, "downloadLink": blobPath, "expiresAt": "2026-11-22T01:55:13.000Z"})},
		{"blob without ETag", "GET", blobPath, 200, map[string]string{"Content-Type": "application/octet-stream"}, "x"},
		{"blob as JSON", "GET", blobPath, 200, map[string]string{"Content-Type": "application/json", "ETag": `"0123abcd"`}, "{}"},
		{"readiness with an unknown state", "GET", "/readyz", 200, ct, `{"status":"ok","checks":{"database":"slow"}}`},
		{"job without counts", "GET", "/api/v1/jobs/job_1", 200, ct, js(with(sampleJob, "counts", del))},
		{"job with an unknown state", "GET", "/api/v1/jobs/job_1", 200, ct, js(with(sampleJob, "state", "RUNNING"))},
		{"job with a count missing", "GET", "/api/v1/jobs/job_1", 200, ct, js(with(sampleJob, "counts", map[string]any{"pending": 1}))},
		{"job target with an unknown status", "GET", "/api/v1/jobs/job_1/mounts", 200, ct, js(map[string]any{"mounts": []any{
			map[string]any{"uid": "M1", "status": "DONE", "commandId": nil}}, "pagination": samplePagination})},
		{"job list without pagination", "GET", "/api/v1/jobs", 200, ct, js(map[string]any{"jobs": []any{sampleJob}})},
		{"pending commands as an array", "GET", "/api/v1/mounts/M1/pending-commands", 200, ct, js([]any{sampleRelease})},
		{"pending command with its issuer", "GET", "/api/v1/mounts/M1/pending-commands", 200, ct, js(map[string]any{"commands": []any{
			with(sampleRelease, "issuedBy", "client-1", "jobId", "job_1")}})},
		{"rollout without counts", "GET", "/api/v1/rollouts/ro_1", 200, ct, js(with(sampleRollout, "counts", del))},
		{"rollout with an unknown state", "GET", "/api/v1/rollouts/ro_1", 200, ct, js(with(sampleRollout, "state", "ACTIVE"))},
		{"rollout with an unknown paused reason", "GET", "/api/v1/rollouts/ro_1", 200, ct, js(with(sampleRollout, "pausedReason", "BORED"))},
		{"rollout without endedAt", "GET", "/api/v1/rollouts/ro_1", 200, ct, js(with(sampleRollout, "endedAt", del))},
		{"rollout with job counts", "GET", "/api/v1/rollouts/ro_1", 200, ct, js(with(sampleRollout, "counts", sampleJob["counts"]))},
		{"rollout target with a job status", "GET", "/api/v1/rollouts/ro_1/mounts", 200, ct, js(map[string]any{"mounts": []any{
			with(sampleRolloutTarget, "state", "EXECUTED")}, "pagination": samplePagination})},
		{"rollout list as jobs", "GET", "/api/v1/rollouts", 200, ct, js(map[string]any{"jobs": []any{sampleRollout}, "pagination": samplePagination})},
		{"rollout answered with a job's 404", "GET", "/api/v1/rollouts/ro_9", 404, pct, problem(404, "JOB_NOT_FOUND")},
		{"cancel answered 410", "POST", "/api/v1/jobs/job_1/cancel", 410, pct, problem(410, "ASSOCIATION_EXPIRED")},
		{"undocumented API route", "GET", "/api/v1/gadgets", 200, ct, `[]`},
		{"undocumented method", "PUT", "/api/v1/mounts/M1", 200, ct, `[]`},
		{"unknown route with a wrong problem", "GET", "/api/v1/gadgets", 404, pct, problem(404, "MOUNT_NOT_FOUND")},
	} {
		errs := e.check(t, v)
		if len(errs) == 0 {
			t.Errorf("%s: Check accepted a response the document does not allow", e.name)
			continue
		}
		t.Logf("%s: %s", e.name, strings.SplitN(errs[0], "\nbody:", 2)[0])
	}
}

// fakeVerifier maps tokens to principals or errors.
type fakeVerifier map[string]any

func (f fakeVerifier) Verify(_ context.Context, raw string) (core.Principal, error) {
	switch v := f[raw].(type) {
	case core.Principal:
		return v, nil
	case error:
		return core.Principal{}, v
	}
	return core.Principal{}, core.Errorf(core.CodeUnauthenticated, "invalid token")
}

// TestOpenAPIRealResponses runs the real handler tree (without a database:
// only answers decided before the core services) over a real listener, and
// checks each answer against the document.
func TestOpenAPIRealResponses(t *testing.T) {
	v := openapitest.New(t)
	expires := time.Now().Add(time.Hour)
	owner := core.Principal{AccountID: "acc-1", ClientID: "client-1", ExpiresAt: expires,
		Grant: core.Grant{Complete: true, Role: core.RoleOwner, MountUIDs: []string{}, Scopes: []string{"openid", "sub"}}}
	restricted := core.Principal{AccountID: "acc-1", ClientID: "client-1", ExpiresAt: expires,
		Grant: core.Grant{Complete: true, Role: core.RoleRestricted, MountUIDs: []string{"M1"}, Scopes: []string{"openid", "sub", "mount:M1"}}}
	incomplete := core.Principal{AccountID: "acc-1", ClientID: "client-1", ExpiresAt: expires,
		Grant: core.Grant{Complete: false, Role: core.RoleOwner, MountUIDs: []string{}, Scopes: []string{"sub"}}}
	ready, redisUp := true, true
	srv := rest.NewServer(rest.Deps{
		Logger: slog.New(slog.DiscardHandler),
		Verifier: fakeVerifier{
			"owner": owner, "restricted": restricted, "incomplete": incomplete,
			"idp-down": core.Errorf(core.CodeUnavailable, "the identity provider is unavailable"),
			"broken":   errors.New("boom"),
		},
		// Input rules are core's: a service without ports decides them
		// before it would need a store.
		Mounts: core.NewMountService(core.MountDeps{Logger: slog.New(slog.DiscardHandler), Filters: aipfilter.New()}),
		Nfc:    core.NewNfcService(nil, nil, nil, slog.New(slog.DiscardHandler)),
		Audit:  core.NewAuditService(nil, (*core.AuditCursors)(core.NewCursorCodec([32]byte{}))),
		Checks: []rest.Checker{{Name: "database", Check: func(context.Context) error {
			if !ready {
				return errors.New("down")
			}
			return nil
		}}, {Name: "redis", Optional: true, Check: func(context.Context) error {
			if !redisUp {
				return errors.New("down")
			}
			return nil
		}}},
	})
	ts := httptest.NewServer(srv)
	defer ts.Close()

	states := func(n int) string {
		entries := make([]any, n)
		for i := range entries {
			entries[i] = map[string]any{"code": "BATTERY_LEVEL", "value": "50", "occurredAt": "2026-11-22T01:40:13Z"}
		}
		return js(map[string]any{"states": entries})
	}
	for _, c := range []struct {
		method, path, token, body string
		status                    int
		code                      string
	}{
		{"GET", "/healthz", "", "", 200, ""},
		{"GET", "/readyz", "", "", 200, ""},
		{"GET", "/api/v1/mounts", "", "", 401, "UNAUTHENTICATED"},
		{"GET", "/api/v1/mounts", "forged", "", 401, "UNAUTHENTICATED"},
		{"GET", "/api/v1/mounts", "idp-down", "", 503, "UNAVAILABLE"},
		{"GET", "/api/v1/mounts", "broken", "", 500, "INTERNAL"},
		{"GET", "/api/v1/accounts/me", "incomplete", "", 403, "INSUFFICIENT_SCOPE"},
		{"GET", "/api/v1/mounts?pageSize=0&colour=red", "owner", "", 400, "VALIDATION_FAILED"},
		{"GET", "/api/v1/mounts/M1?verbose=1", "owner", "", 400, "VALIDATION_FAILED"},
		{"POST", "/api/v1/mounts", "restricted", `{"uid":"M1"}`, 403, "FORBIDDEN"},
		{"POST", "/api/v1/mounts", "owner", `{"uid":5}`, 400, "VALIDATION_FAILED"},
		{"PATCH", "/api/v1/mounts/M2", "restricted", `{}`, 404, "MOUNT_NOT_FOUND"},
		{"PATCH", "/api/v1/mounts/M1", "restricted", `{}`, 403, "FORBIDDEN"},
		{"PATCH", "/api/v1/mounts/M1", "owner", `{"colour":"red"}`, 400, "VALIDATION_FAILED"},
		{"POST", "/api/v1/mounts/M1/states", "owner", `{"states":[{"code":"BATTERY_LEVEL","value":1}]}`, 400, "VALIDATION_FAILED"},
		{"POST", "/api/v1/mounts/M1/states", "owner", states(501), 413, "PAYLOAD_TOO_LARGE"},
		{"POST", "/api/v1/mounts/M1/states", "owner", `{"states":"` + strings.Repeat("x", rest.MaxBodyBytes) + `"}`, 413, "PAYLOAD_TOO_LARGE"},
		{"GET", "/api/v1/mounts/M1/states?code=VOLTAGE", "owner", "", 400, "VALIDATION_FAILED"},
		{"GET", "/api/v1/mounts/M1/query?code=CONFIGURE_ALARM&alarmMode=ON&alarmMode=OFF", "owner", "", 400, "VALIDATION_FAILED"},
		{"GET", "/api/v1/mounts/M1/commands?currentPage=0", "owner", "", 400, "VALIDATION_FAILED"},
		{"GET", "/api/v1/nfc-tags?pageSize=101", "owner", "", 400, "VALIDATION_FAILED"},
		{"POST", "/api/v1/nfc-tags", "owner", `{}`, 400, "VALIDATION_FAILED"},
		{"POST", "/api/v1/nfc-tags", "restricted", `{"tagUids":[],"mountUid":"M1"}`, 403, "FORBIDDEN"},
		{"PATCH", "/api/v1/nfc-tags/04A1B2C3", "restricted", `{}`, 403, "FORBIDDEN"},
		{"GET", "/api/v1/firmware/versions?currentPage=x", "owner", "", 400, "VALIDATION_FAILED"},
		{"GET", "/api/v1/firmware/check-update?modelNumber=HM-1&channel=beta", "owner", "", 400, "VALIDATION_FAILED"},
		{"GET", "/api/v1/firmware/download?version=1", "owner", "", 400, "VALIDATION_FAILED"},
		{"GET", "/api/v1/firmware/blobs/firmware/HM-1/1.3.0-a1b2c3.bin?expires=1&signature=00", "", "", 404, "NOT_FOUND"},
		{"GET", "/api/v1/audit", "restricted", "", 403, "FORBIDDEN"},
		{"POST", "/api/v1/alarm-rules", "restricted", `{"name":"x"}`, 403, "FORBIDDEN"},
		{"PATCH", "/api/v1/alarm-rules/alr_1", "restricted", `{}`, 403, "FORBIDDEN"},
		{"GET", "/api/v1/alarm-rules/suggested", "restricted", "", 403, "FORBIDDEN"},
		{"GET", "/api/v1/alarm-rules", "restricted", "", 403, "FORBIDDEN"},
		{"GET", "/api/v1/alarm-rules/alr_1", "restricted", "", 403, "FORBIDDEN"},
		{"DELETE", "/api/v1/alarm-rules/alr_1", "restricted", "", 403, "FORBIDDEN"},
		{"POST", "/api/v1/alarms/alm_1/acknowledge", "restricted", "", 403, "FORBIDDEN"},
		{"GET", "/api/v1/alarm-rules?pageSize=0", "owner", "", 400, "VALIDATION_FAILED"},
		{"POST", "/api/v1/alarm-rules", "owner", `{"name":"x","colour":"red"}`, 400, "VALIDATION_FAILED"},
		{"POST", "/api/v1/alarm-rules", "owner", `{"conditions":[{"code":"BATTERY_LEVEL","op":"<","value":20}]}`, 400, "VALIDATION_FAILED"},
		{"GET", "/api/v1/alarms?state=ACTIVE&colour=red", "owner", "", 400, "VALIDATION_FAILED"},
		{"GET", "/api/v1/audit?limit=1001", "owner", "", 400, "VALIDATION_FAILED"},
		{"GET", "/api/v1/audit?after=xyz", "owner", "", 400, "VALIDATION_FAILED"},
		{"GET", "/api/v1/audit?action=mount.explode&colour=red", "owner", "", 400, "VALIDATION_FAILED"},
		{"POST", "/api/v1/rollouts", "restricted", `{"modelNumber":`, 403, "FORBIDDEN"},
		{"GET", "/api/v1/rollouts", "restricted", "", 403, "FORBIDDEN"},
		{"GET", "/api/v1/rollouts/ro_1/mounts", "restricted", "", 403, "FORBIDDEN"},
		{"POST", "/api/v1/rollouts/ro_1/resume", "restricted", "", 403, "FORBIDDEN"},
		{"POST", "/api/v1/rollouts", "owner", `{"modelNumber":"HM-1","healthWindow":3600}`, 400, "VALIDATION_FAILED"},
		{"GET", "/api/v1/rollouts?pageSize=0", "owner", "", 400, "VALIDATION_FAILED"},
		{"POST", "/api/v1/rollouts/ro_1/cancel?force=1", "owner", "", 400, "VALIDATION_FAILED"},
		{"GET", "/api/v1/mounts/M1/query?code=INSTALL_FIRMWARE&revision=1.3.0", "restricted", "", 403, "FORBIDDEN"},
		{"GET", "/api/v1/firmware/check-update?modelNumber=HM-1&mountUid=M1&channel=beta", "owner", "", 400, "VALIDATION_FAILED"},
		{"GET", "/api/v1/nowhere", "owner", "", 404, "NOT_FOUND"},
		{"PUT", "/api/v1/mounts/M1", "owner", "{}", 405, "METHOD_NOT_ALLOWED"},
	} {
		res, body := call(t, ts.URL, c.method, c.path, c.token, c.body)
		where := c.method + " " + c.path
		if len(where) > 80 {
			where = where[:80]
		}
		if res.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d: %s", where, res.StatusCode, c.status, body)
		}
		if c.code != "" {
			var p struct{ Code string }
			if err := json.Unmarshal(body, &p); err != nil || p.Code != c.code {
				t.Errorf("%s: code %q, want %q", where, p.Code, c.code)
			}
		}
		v.Check(t, res.Request, res, body)
	}

	// A fleet filter is parsed before any store: whatever is wrong with it
	// is 400 on the field filter, with a message saying what and where.
	for _, c := range []struct{ filter, says string }{
		{`batteryLevel <`, "is not a valid filter"},
		{`colour = "red"`, `unknown field "colour"`},
		{`batteryLevel < "low"`, "batteryLevel is a number"},
		{`name:"x"`, "':' is not supported"},
		{`presence = "AWAY"`, `presence is one of ONLINE, OFFLINE, UNKNOWN, not "AWAY"`},
		{strings.Repeat("x", core.MaxFilterLength+1), "at most 2000 characters"},
	} {
		for _, token := range []string{"owner", "restricted"} {
			res, body := call(t, ts.URL, "GET", "/api/v1/mounts?filter="+url.QueryEscape(c.filter), token, "")
			var p struct {
				Code   string
				Errors []struct{ Field, Message string }
			}
			_ = json.Unmarshal(body, &p)
			if res.StatusCode != http.StatusBadRequest || p.Code != "VALIDATION_FAILED" || len(p.Errors) != 1 ||
				p.Errors[0].Field != "filter" || !strings.Contains(p.Errors[0].Message, c.says) {
				t.Errorf("filter %.40q as %s: %d %s, want 400 on filter saying %q", c.filter, token, res.StatusCode, body, c.says)
			}
			v.Check(t, res.Request, res, body)
		}
	}

	// Redis down: still ready, degraded; the database down too: not ready.
	redisUp = false
	res, body := call(t, ts.URL, "GET", "/readyz", "", "")
	if want := `{"checks":{"database":"ok","redis":"degraded"},"status":"degraded"}`; res.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != want {
		t.Errorf("readyz with an optional check failing: %d %s, want 200 %s", res.StatusCode, body, want)
	}
	v.Check(t, res.Request, res, body)
	ready = false
	res, body = call(t, ts.URL, "GET", "/readyz", "", "")
	if want := `{"checks":{"database":"unavailable","redis":"degraded"},"status":"unavailable"}`; res.StatusCode != http.StatusServiceUnavailable || strings.TrimSpace(string(body)) != want {
		t.Errorf("readyz with a required check failing: %d %s, want 503 %s", res.StatusCode, body, want)
	}
	v.Check(t, res.Request, res, body)

	t.Run("served document", func(t *testing.T) {
		res, body := call(t, ts.URL, "GET", "/api/v1/openapi.json", "", "")
		if res.StatusCode == http.StatusNotFound {
			t.Skip("GET /api/v1/openapi.json is not registered in NewServer yet")
		}
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET /api/v1/openapi.json without a token: status %d: %s", res.StatusCode, body)
		}
		if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("Content-Type %q, want application/json", ct)
		}
		if !bytes.Equal(body, rest.OpenAPIDocument()) {
			t.Errorf("the served document differs from the embedded one")
		}
		v.Check(t, res.Request, res, body)
	})
}

func call(t *testing.T, base, method, path, token, body string) (*http.Response, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Access-Key", token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, data
}
