package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/device/sim"
	"github.com/mountd/mountd/device/simmount"
	"github.com/mountd/mountd/protocol"
)

// fakeAPI is as much of mountd as mountsim talks to: the token endpoint,
// association, confirmation and state reports, with tokens that really
// expire and duplicates that really count.
type fakeAPI struct {
	t         *testing.T
	expiresIn time.Duration

	mu        sync.Mutex
	tokens    map[string]fakeToken
	issued    map[string]int // role → tokens issued
	keys      map[string]ed25519.PrivateKey
	devices   map[string]string // uid → the device key pinned at association
	confirmed map[string]bool
	entries   map[string]bool            // uid|code|occurredAt|value
	nonces    map[string]string          // nonce → uid it was issued to
	receipts  map[string]bool            // nonces with a receipt
	counters  map[string]map[uint64]bool // uid → counters of verified reports
	refusals  map[string]int             // "403 SIGNATURE_REQUIRED", ... → count
	reports   chan fakeReport

	base     string            // the server's address: the tokens' issuer
	jobs     []fakeJob         // offered to every mount until finished there
	jobOf    map[string]string // nonce → job
	finished map[string]string // job|uid → outcome that finished it
	// proved holds uid|revision of the verified reports: as mountd does,
	// an install whose mount proved the new revision is not offered again
	// (its receipt may have been lost with a dropped link).
	proved   map[string]bool
	outcomes map[string]map[string]int // job → outcome → receipts taken
	image    []byte                    // the firmware blob downloads answer
	// gateway are the statuses a proxy in front answers, in turn, to the
	// next uploads (states, receipts) without passing them on: a replica
	// restarting behind nginx.
	gateway []int
}

// fakeJob is a job over the whole fleet, as pending-commands offers it.
type fakeJob struct {
	id     string
	code   string
	params map[string]string
}

type fakeToken struct {
	role   string // owner, restricted (maintainer) or rider (restricted with mount items)
	mounts map[string]bool
	exp    time.Time
}

type fakeReport struct {
	uid      string
	revision string // the signed softwareRevision
	states   map[string]string
	verified bool
	counter  uint64 // the mount's counter, when verified: the order it said things in
}

func newFakeAPI(t *testing.T, expiresIn time.Duration) (*fakeAPI, *httptest.Server) {
	f := &fakeAPI{t: t, expiresIn: expiresIn, tokens: map[string]fakeToken{}, issued: map[string]int{},
		keys: map[string]ed25519.PrivateKey{}, devices: map[string]string{}, confirmed: map[string]bool{}, entries: map[string]bool{},
		nonces: map[string]string{}, receipts: map[string]bool{}, counters: map[string]map[uint64]bool{}, refusals: map[string]int{},
		reports: make(chan fakeReport, 10000), jobOf: map[string]string{}, finished: map[string]string{}, outcomes: map[string]map[string]int{}, proved: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"userinfo_endpoint":%q}`, f.base+"/oidc/v1/userinfo")
	})
	mux.HandleFunc("GET /oidc/v1/userinfo", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"sub":"cid"}`)
	})
	mux.HandleFunc("GET /api/v1/mounts/{uid}/pending-commands", f.auth("restricted", f.pending))
	mux.HandleFunc("POST /oauth/v2/token", f.token)
	mux.HandleFunc("POST /api/v1/mounts", f.auth("owner", f.claim))
	mux.HandleFunc("POST /api/v1/mounts/{uid}/confirm-association", f.auth("owner", f.confirm))
	mux.HandleFunc("POST /api/v1/mounts/{uid}/states", f.auth("restricted", f.states))
	mux.HandleFunc("POST /api/v1/mounts/{uid}/commands/receipts", f.auth("restricted", f.uploadReceipts))
	mux.HandleFunc("GET /api/v1/firmware/download", f.auth("restricted", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"downloadLink":"/api/v1/firmware/blobs/img","expiresAt":%q}`, protocol.FormatTime(time.Now().Add(time.Minute)))
	}))
	mux.HandleFunc("GET /api/v1/firmware/blobs/img", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		img := f.image
		f.mu.Unlock()
		_, _ = w.Write(img)
	})
	// The SDK asks for a time token and the revocation list at every
	// connection (offline access); this fake signs neither, and the SDK
	// goes on without them.
	for _, path := range []string{"GET /api/v1/mounts/{uid}/time", "GET /api/v1/mounts/{uid}/revocations"} {
		mux.HandleFunc(path, f.auth("restricted", func(w http.ResponseWriter, r *http.Request) {
			problem(w, http.StatusNotFound, "NOT_FOUND")
		}))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("unexpected %s %s", r.Method, r.URL)
		http.NotFound(w, r)
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && (strings.HasSuffix(r.URL.Path, "/states") || strings.HasSuffix(r.URL.Path, "/commands/receipts")) {
			f.mu.Lock()
			var status int
			if len(f.gateway) > 0 {
				status, f.gateway = f.gateway[0], f.gateway[1:]
			}
			f.mu.Unlock()
			if status != 0 {
				if status == http.StatusServiceUnavailable {
					w.Header().Set("Retry-After", "1")
				}
				w.Header().Set("Content-Type", "text/html")
				w.WriteHeader(status)
				fmt.Fprintf(w, "<html><body><center><h1>%d</h1></center><hr><center>nginx</center></body></html>", status)
				return
			}
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	f.base = srv.URL
	return f, srv
}

func (f *fakeAPI) token(w http.ResponseWriter, r *http.Request) {
	id, secret, basic := r.BasicAuth() // HTTP Basic or the form, as mountd takes them
	if r.ParseForm() != nil || !basic {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	if r.PostForm.Get("grant_type") != "client_credentials" || id != "cid" || secret != "csec" {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":"invalid_client"}`)
		return
	}
	scope := " " + r.PostForm.Get("scope") + " "
	for _, item := range []string{"openid", "sub", "urn:mountd:iam:org:project:id:mountd:aud"} {
		if !strings.Contains(scope, " "+item+" ") {
			f.t.Errorf("scope %q lacks %s", scope, item)
		}
	}
	role := "owner"
	mounts := map[string]bool{}
	for _, item := range strings.Fields(scope) {
		if uid, ok := strings.CutPrefix(item, "mount:"); ok {
			mounts[uid] = true
		}
	}
	if strings.Contains(scope, " role:restricted ") {
		role = "restricted"
		if len(mounts) > 0 {
			role = "rider"
		}
	}
	f.mu.Lock()
	f.issued[role]++
	// Shaped as a JWT, as the SDK (mountsim's phones) reads its claims; the
	// last part names it here.
	claims, _ := json.Marshal(map[string]any{"iss": f.base, "exp": time.Now().Add(f.expiresIn).Unix(), "scope": strings.TrimSpace(scope)})
	tok := "e30." + base64.RawURLEncoding.EncodeToString(claims) + "." + fmt.Sprintf("%s-%d", role, f.issued[role])
	f.tokens[tok] = fakeToken{role: role, mounts: mounts, exp: time.Now().Add(f.expiresIn)}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json") // as mountd's identity provider answers
	fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":%d}`, tok, int(f.expiresIn.Seconds()))
}

type tokenKey struct{}

// auth takes the role a route needs; "restricted" routes take riders too,
// for the mounts their token names.
func (f *fakeAPI) auth(role string, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		tok, ok := f.tokens[r.Header.Get("Access-Key")]
		f.mu.Unlock()
		switch {
		case !ok || time.Now().After(tok.exp):
			problem(w, 401, "UNAUTHENTICATED")
		case tok.role != role && (role != "restricted" || tok.role != "rider"):
			problem(w, 403, "FORBIDDEN")
		case tok.role == "rider" && !tok.mounts[r.PathValue("uid")]:
			problem(w, 404, "MOUNT_NOT_FOUND")
		default:
			next(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, tok)))
		}
	}
}

// refuse answers a problem and counts it.
func (f *fakeAPI) refuse(w http.ResponseWriter, status int, code string) {
	f.refusals[fmt.Sprintf("%d %s", status, code)]++
	problem(w, status, code)
}

func problem(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"status":%d,"code":%q}`, status, code)
}

var macPattern = regexp.MustCompile(`^([0-9A-F]{2}:){5}[0-9A-F]{2}$`)

func (f *fakeAPI) claim(w http.ResponseWriter, r *http.Request) {
	var body map[string]string
	if json.NewDecoder(r.Body).Decode(&body) != nil || body["uid"] == "" || !macPattern.MatchString(body["macAddress"]) ||
		body["serialNumber"] == "" || body["modelNumber"] == "" {
		problem(w, 400, "VALIDATION_FAILED")
		return
	}
	device, brought := body["devicePublicKey"]
	if brought && !protocol.ValidPublicKey(device) {
		problem(w, 400, "VALIDATION_FAILED")
		return
	}
	pub, priv, _ := ed25519.GenerateKey(nil)
	now := time.Now()
	key := hex.EncodeToString(pub)
	nonce := protocol.NewNonce()
	f.mu.Lock()
	f.keys[body["uid"]] = priv
	if brought { // without one, the key pinned before stays
		f.devices[body["uid"]] = device
	}
	f.nonces[nonce] = body["uid"]
	f.mu.Unlock()
	cmd := protocol.BLECommand{
		Code: "ASSOCIATE_OWNER", GeneratedAt: protocol.FormatTime(now),
		Data:    map[string]any{"accountId": "acc-1", "publicKey": key, "expiresAt": protocol.FormatTime(now.Add(5 * time.Minute))},
		Payload: protocol.BuildPayload(now, string(protocol.CmdAssociateOwner), body["uid"], map[string]string{"accountId": "acc-1", "publicKey": key}, nonce),
	}
	json.NewEncoder(w).Encode([]protocol.BLECommand{cmd})
}

func (f *fakeAPI) confirm(w http.ResponseWriter, r *http.Request) {
	uid := r.PathValue("uid")
	f.mu.Lock()
	_, claimed := f.keys[uid]
	f.confirmed[uid] = claimed
	f.mu.Unlock()
	if !claimed {
		problem(w, 404, "MOUNT_NOT_FOUND")
		return
	}
	fmt.Fprintf(w, `{"uid":%q,"associationState":"ASSOCIATED"}`, uid)
}

// states checks a report as mountd does (docs/api.md, "The truth from the
// mount"): 404 before 403 SIGNATURE_REQUIRED (a rider's unsigned report for a
// mount with a device key) before 400 INVALID_SIGNATURE before the content.
func (f *fakeAPI) states(w http.ResponseWriter, r *http.Request) {
	uid := r.PathValue("uid")
	tok := r.Context().Value(tokenKey{}).(fakeToken)
	var body protocol.SignedStates
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if dec.Decode(&body) != nil || len(body.States) != 4 {
		problem(w, 400, "VALIDATION_FAILED")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	device := f.devices[uid]
	switch {
	case !f.confirmed[uid]:
		problem(w, 404, "MOUNT_NOT_FOUND")
		return
	case body.Signature == "" && device != "" && tok.role == "rider":
		f.refuse(w, 403, "SIGNATURE_REQUIRED")
		return
	case body.Signature != "" && (device == "" || body.Counter == nil || !verifyStates(device, uid, body)):
		f.refuse(w, 400, "INVALID_SIGNATURE")
		return
	}
	rep := fakeReport{uid: uid, revision: body.SoftwareRevision, states: map[string]string{}, verified: body.Signature != ""}
	if rep.verified && body.Counter != nil {
		rep.counter = *body.Counter
	}
	if rep.verified {
		if f.counters[uid] == nil {
			f.counters[uid] = map[uint64]bool{}
		}
		if f.counters[uid][*body.Counter] {
			f.t.Errorf("%s: counter %d signed twice", uid, *body.Counter)
		}
		f.counters[uid][*body.Counter] = true
		f.proved[uid+"|"+body.SoftwareRevision] = true
	}
	accepted, dups := 0, 0
	for _, s := range body.States {
		if err := protocol.ValidateState(protocol.StateCode(s.Code), s.Value); err != nil {
			problem(w, 400, "VALIDATION_FAILED")
			return
		}
		if _, err := time.Parse(time.RFC3339, s.OccurredAt); err != nil {
			problem(w, 400, "VALIDATION_FAILED")
			return
		}
		rep.states[s.Code] = s.Value
		k := uid + "|" + s.Code + "|" + s.OccurredAt + "|" + s.Value
		if f.entries[k] {
			dups++
		} else {
			f.entries[k] = true
			accepted++
		}
	}
	f.reports <- rep
	fmt.Fprintf(w, `{"accepted":%d,"duplicates":%d}`, accepted, dups)
}

func verifyStates(device, uid string, body protocol.SignedStates) bool {
	r := protocol.Report{UID: uid, Counter: *body.Counter, SoftwareRevision: body.SoftwareRevision}
	for _, e := range body.States {
		at, err := time.Parse(protocol.TimeLayout, e.OccurredAt)
		if err != nil {
			return false
		}
		r.Entries = append(r.Entries, protocol.ReportEntry{Code: protocol.StateCode(e.Code), Value: e.Value, OccurredAt: at})
	}
	return protocol.Verify(device, protocol.BuildReportText(r), body.Signature)
}

func (f *fakeAPI) uploadReceipts(w http.ResponseWriter, r *http.Request) {
	uid := r.PathValue("uid")
	var body struct {
		Receipts []protocol.UploadReceipt `json:"receipts"`
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if dec.Decode(&body) != nil || len(body.Receipts) == 0 {
		problem(w, 400, "VALIDATION_FAILED")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	device := f.devices[uid]
	accepted, dups := 0, 0
	for _, rc := range body.Receipts {
		at, err := time.Parse(protocol.TimeLayout, rc.At)
		text := protocol.BuildReceiptText(protocol.Receipt{UID: uid, Nonce: rc.Nonce, Outcome: rc.Outcome, Reason: rc.Reason, Counter: rc.Counter, At: at})
		switch {
		case f.nonces[rc.Nonce] != uid:
			f.refuse(w, 404, "COMMAND_NOT_FOUND")
			return
		case device != "" && rc.Signature == "":
			f.refuse(w, 403, "SIGNATURE_REQUIRED")
			return
		case err != nil || !protocol.Verify(device, text, rc.Signature):
			f.refuse(w, 400, "INVALID_SIGNATURE")
			return
		case f.receipts[rc.Nonce]:
			dups++
		default:
			f.receipts[rc.Nonce] = true
			accepted++
			if job := f.jobOf[rc.Nonce]; job != "" {
				// An install is offered again while its outcome is unknown,
				// as mountd does: a phone whose link dropped mid-transfer
				// leaves the mount to another phone, and both may install.
				// Any other job runs once at a mount.
				if prev := f.finished[job+"|"+uid]; prev == "" {
					f.finished[job+"|"+uid] = rc.Outcome
				} else if f.codeOf(job) != string(protocol.CmdInstallFirmware) {
					f.t.Errorf("job %s at %s: a second receipt (%s) after %s", job, uid, rc.Outcome, prev)
				}
				if f.outcomes[job] == nil {
					f.outcomes[job] = map[string]int{}
				}
				f.outcomes[job][rc.Outcome]++
			}
		}
	}
	fmt.Fprintf(w, `{"accepted":%d,"duplicates":%d}`, accepted, dups)
}

// pending answers a mount's pending commands: one freshly signed command
// for every job not yet finished there.
// codeOf is a job's command code.
func (f *fakeAPI) codeOf(job string) string {
	for _, j := range f.jobs {
		if j.id == job {
			return j.code
		}
	}
	return ""
}

func (f *fakeAPI) pending(w http.ResponseWriter, r *http.Request) {
	uid := r.PathValue("uid")
	f.mu.Lock()
	defer f.mu.Unlock()
	key := f.keys[uid]
	if key == nil || !f.confirmed[uid] {
		problem(w, 404, "MOUNT_NOT_FOUND")
		return
	}
	cmds := []map[string]any{}
	for _, j := range f.jobs {
		if f.finished[j.id+"|"+uid] != "" || j.code == string(protocol.CmdInstallFirmware) && f.proved[uid+"|"+j.params["revision"]] {
			continue
		}
		now, nonce := time.Now(), protocol.NewNonce()
		payload := protocol.BuildPayload(now, j.code, uid, j.params, nonce)
		data := map[string]any{"expiresAt": protocol.FormatTime(now.Add(5 * time.Minute))}
		for k, v := range j.params {
			data[k] = v
		}
		f.nonces[nonce], f.jobOf[nonce] = uid, j.id
		cmds = append(cmds, map[string]any{"id": nonce, "jobId": j.id, "code": j.code, "data": data, "generatedAt": protocol.FormatTime(now),
			"payload": payload, "signedToken": protocol.Sign(key, payload), "status": "ISSUED"})
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"commands": cmds})
}

func TestIdentity(t *testing.T) {
	uid, serial, mac := identity("SIM", 1)
	if uid != "SIM-0001" || serial != "SN-SIM-000001" || !macPattern.MatchString(mac) || !strings.HasPrefix(mac, "02:") {
		t.Fatal(uid, serial, mac)
	}
	seen := map[string]bool{}
	for _, p := range []string{"SIM", "LOAD"} {
		for i := 1; i <= 300; i++ {
			u, s, m := identity(p, i)
			if u2, s2, m2 := identity(p, i); u2 != u || s2 != s || m2 != m {
				t.Fatal("identity is not deterministic")
			}
			if seen[m] {
				t.Fatalf("MAC %s twice", m)
			}
			seen[m] = true
		}
	}
}

func TestFleetReports(t *testing.T) {
	api, srv := newFakeAPI(t, time.Second)
	var out, errs bytes.Buffer
	err := newCommand(&out, &errs, nil).Run(context.Background(), []string{"mountsim",
		"--mounts", "3", "--prefix", "T", "--air", "127.0.0.1:0", "--api", srv.URL + "/",
		"--client-id", "cid", "--client-secret", "csec", "--report-interval", "150ms",
		"--associate", "--json", "--duration", "2s"})
	if err != nil {
		t.Fatalf("%v\n%s", err, errs.String())
	}
	var sum Summary
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		t.Fatalf("summary %q: %v", out.String(), err)
	}
	if sum.Mounts != 3 || sum.Associated != 3 || sum.Errors != 0 || sum.CommandsAccepted != 3 {
		t.Fatalf("summary %+v\n%s", sum, errs.String())
	}
	// About 2s / 150ms reports per mount, less the random start.
	if sum.Reports < 3*6 || sum.EntriesAccepted < sum.Reports*2 || sum.Duplicates < sum.Reports {
		t.Fatalf("summary %+v: the lock and helmet re-reported must be duplicates, battery and temperature new", sum)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if api.issued["restricted"] < 2 {
		t.Fatalf("%d maintainer tokens for a 2s run of 1s tokens: no renewal", api.issued["restricted"])
	}
	if api.issued["owner"] < 1 {
		t.Fatal("no owner token")
	}
	per := map[string]int{}
	close(api.reports)
	for r := range api.reports {
		per[r.uid]++
		if r.states["MOUNT_LOCKED"] != "1" || r.states["HELMET_MOUNTED"] != "1" || !r.verified {
			t.Fatalf("report %+v", r)
		}
	}
	// Every mount brought its device key, signed every report, and the
	// receipt of its association went in.
	if len(api.devices) != 3 || sum.SignedReports != sum.Reports || sum.Receipts != 3 || sum.ReceiptsAccepted != 3 || len(api.receipts) != 3 {
		t.Fatalf("summary %+v, %d device keys, %d receipts", sum, len(api.devices), len(api.receipts))
	}
	if len(per) != 3 || per["T-0001"] == 0 || per["T-0003"] == 0 {
		t.Fatalf("reports per mount %v", per)
	}
}

// TestUploadsOutlastAProxysGatewayErrors: with a replica restarting behind
// the proxy, uploads are answered 502, 503 (Retry-After) and 504. Each is
// kept and sent again until the API takes it: no error, nothing lost.
func TestUploadsOutlastAProxysGatewayErrors(t *testing.T) {
	api, srv := newFakeAPI(t, time.Hour)
	api.gateway = []int{502, 503, 504, 502, 503, 504}
	var out, errs bytes.Buffer
	err := newCommand(&out, &errs, nil).Run(context.Background(), []string{"mountsim",
		"--mounts", "3", "--prefix", "G", "--air", "127.0.0.1:0", "--api", srv.URL,
		"--client-id", "cid", "--client-secret", "csec", "--report-interval", "150ms",
		"--associate", "--json", "--duration", "3500ms"})
	if err != nil {
		t.Fatalf("%v\n%s", err, errs.String())
	}
	var sum Summary
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		t.Fatalf("summary %q: %v", out.String(), err)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.gateway) != 0 || sum.UploadsRetried != 6 {
		t.Fatalf("summary %+v, %d gateway errors left: want all 6 met and retried", sum, len(api.gateway))
	}
	// Every report made reached the API (none lost to the proxy), and
	// every association's receipt.
	if sum.Errors != 0 || sum.Receipts != 3 || sum.ReceiptsAccepted != 3 || int64(len(api.reports)) != sum.Reports || sum.Reports < 3*4 {
		t.Fatalf("summary %+v: the API took %d reports\n%s", sum, len(api.reports), errs.String())
	}
}

func TestReleaseIsReportedAtOnce(t *testing.T) {
	api, srv := newFakeAPI(t, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	var out, errs bytes.Buffer
	go func() {
		done <- newCommand(&out, &errs, ready).Run(ctx, []string{"mountsim",
			"--mounts", "2", "--prefix", "R", "--air", "127.0.0.1:0", "--api", srv.URL,
			"--client-id", "cid", "--client-secret", "csec", "--report-interval", "1h",
			"--return-after", "200ms", "--associate", "--json"})
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("mountsim: %v\n%s", err, errs.String())
	}

	// The phone's part: connect over the air and release the helmet.
	_, _, mac := identity("R", 2)
	tctx, tcancel := context.WithTimeout(ctx, 10*time.Second)
	defer tcancel()
	link, err := sim.Dial(addr).Connect(tctx, mac)
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	api.mu.Lock()
	key := api.keys["R-0002"]
	api.mu.Unlock()
	now := time.Now()
	payload := protocol.BuildPayload(now, string(protocol.CmdReleaseHelmet), "R-0002", nil, protocol.NewNonce())
	sig := hex.EncodeToString(ed25519.Sign(key, []byte(payload)))
	raw, _ := json.Marshal(protocol.BLECommand{Code: "RELEASE_HELMET", Data: map[string]any{}, GeneratedAt: protocol.FormatTime(now), Payload: payload, SignedToken: &sig})
	for _, f := range protocol.SplitFrames(raw, link.MTU()) {
		if err := link.WriteFrame(tctx, f); err != nil {
			t.Fatal(err)
		}
	}
	var r protocol.Reassembler
	for accepted := false; !accepted; {
		select {
		case f := <-link.Frames():
			msg, complete, _ := r.Add(f)
			var m protocol.BLEMessage
			if complete && json.Unmarshal(msg, &m) == nil && m.Type == "result" {
				if !m.Accepted {
					t.Fatalf("refused: %s", m.Reason)
				}
				accepted = true
			}
		case <-tctx.Done():
			t.Fatal("no result")
		}
	}

	// With an hour between scheduled reports, only the changes are reported:
	// first the release, then the helmet coming back.
	for _, want := range []string{"0", "1"} {
		select {
		case rep := <-api.reports:
			if rep.uid != "R-0002" || rep.states["MOUNT_LOCKED"] != want || rep.states["HELMET_MOUNTED"] != want {
				t.Fatalf("report %+v, want lock and helmet %s", rep, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no prompt report of lock %s", want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var sum Summary
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Reports != 2 || sum.CommandsAccepted != 3 || sum.Errors != 0 || sum.Air != addr {
		t.Fatalf("summary %+v", sum)
	}
}

func TestWithoutCredentials(t *testing.T) {
	var out, errs bytes.Buffer
	err := newCommand(&out, &errs, nil).Run(context.Background(), []string{"mountsim", "--associate", "--air", "", "--api", "http://127.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), "--client-id") {
		t.Fatalf("--associate without credentials: %v", err)
	}
	out.Reset()
	err = newCommand(&out, &errs, nil).Run(context.Background(), []string{"mountsim", "--mounts", "2", "--air", "", "--duration", "100ms"})
	if err != nil || !strings.Contains(out.String(), "mounts 2, associated 0, reports 0") {
		t.Fatalf("simulation only: %v %q", err, out.String())
	}
}

// TestReportsOnlyWhenAssociated: mounts that hold no owner key report
// nothing (they used to post every interval and count each 404 as an
// error), and a mount the API stops knowing is paused with a back-off
// instead of being reported every interval.
func TestReportsOnlyWhenAssociated(t *testing.T) {
	t.Run("never associated", func(t *testing.T) {
		_, srv := newFakeAPI(t, time.Hour)
		var out, errs bytes.Buffer
		err := newCommand(&out, &errs, nil).Run(context.Background(), []string{"mountsim",
			"--mounts", "3", "--prefix", "N", "--air", "", "--api", srv.URL,
			"--client-id", "cid", "--client-secret", "csec", "--report-interval", "50ms", "--json", "--duration", "700ms"})
		if err != nil {
			t.Fatal(err)
		}
		var sum Summary
		if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
			t.Fatal(err)
		}
		if sum.Reports != 0 || sum.Errors != 0 || sum.Associated != 0 {
			t.Fatalf("summary %+v: unassociated mounts must not report", sum)
		}
	})
	t.Run("no longer known to the API", func(t *testing.T) {
		api, srv := newFakeAPI(t, time.Hour)
		go func() { // the account lets the mount go (abandon, expiry) mid-run
			time.Sleep(300 * time.Millisecond)
			api.mu.Lock()
			delete(api.confirmed, "G-0001")
			api.mu.Unlock()
		}()
		go func() {
			for range api.reports {
			}
		}()
		var out, errs bytes.Buffer
		err := newCommand(&out, &errs, nil).Run(context.Background(), []string{"mountsim",
			"--mounts", "1", "--prefix", "G", "--air", "", "--api", srv.URL, "--associate",
			"--client-id", "cid", "--client-secret", "csec", "--report-interval", "50ms", "--json", "--duration", "2s"})
		if err != nil {
			t.Fatal(err)
		}
		var sum Summary
		if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
			t.Fatal(err)
		}
		// 1.7 s at 50 ms would be about 34 refused reports; doubling the
		// wait from 50 ms leaves about 5.
		if sum.Errors != 0 || sum.NotAssociated < 1 || sum.NotAssociated > 7 || sum.Associated != 1 {
			t.Fatalf("summary %+v\n%s", sum, errs.String())
		}
	})
}

// TestLegacyAndForgery: a fleet of both firmwares, with forging phones:
// keyed mounts' reports are signed and verified, the legacy mount's are
// not (and it brings no device key), and every forgery is refused, of
// both kinds.
func TestLegacyAndForgery(t *testing.T) {
	api, srv := newFakeAPI(t, time.Hour)
	var out, errs bytes.Buffer
	err := newCommand(&out, &errs, nil).Run(context.Background(), []string{"mountsim",
		"--mounts", "4", "--legacy", "1", "--forge", "--prefix", "F", "--air", "", "--api", srv.URL,
		"--client-id", "cid", "--client-secret", "csec", "--report-interval", "100ms",
		"--associate", "--json", "--duration", "1500ms"})
	if err != nil {
		t.Fatalf("%v\n%s", err, errs.String())
	}
	var sum Summary
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Errors != 0 || sum.Legacy != 1 || sum.Associated != 4 || sum.Receipts != 3 || sum.ReceiptsAccepted != 3 {
		t.Fatalf("summary %+v\n%s", sum, errs.String())
	}
	if sum.ForgedReports < 6 || sum.ForgedRefused != sum.ForgedReports || sum.ForgedAccepted != 0 {
		t.Fatalf("forgeries: %+v", sum)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if _, ok := api.devices["F-0004"]; ok || len(api.devices) != 3 {
		t.Fatalf("device keys %v: the legacy mount is the last", api.devices)
	}
	if api.refusals["403 SIGNATURE_REQUIRED"] == 0 || api.refusals["400 INVALID_SIGNATURE"] == 0 ||
		int64(api.refusals["403 SIGNATURE_REQUIRED"]+api.refusals["400 INVALID_SIGNATURE"]) != sum.ForgedRefused {
		t.Fatalf("refusals %v, summary %+v", api.refusals, sum)
	}
	if api.issued["rider"] == 0 {
		t.Fatal("no rider token")
	}
	close(api.reports)
	var signed, unsigned int64
	for r := range api.reports {
		if r.verified == (r.uid == "F-0004") {
			t.Fatalf("report %+v", r)
		}
		if r.verified {
			signed++
		} else {
			unsigned++
		}
	}
	if signed != sum.SignedReports || unsigned == 0 || signed+unsigned != sum.Reports {
		t.Fatalf("%d signed, %d unsigned reports stored; summary %+v", signed, unsigned, sum)
	}
}

// TestStateDir: with --state-dir, a second run goes on where the first
// stopped: same device keys, owners kept (no association needed), and
// counters that never repeat (the fake API fails the test on a repeat).
func TestStateDir(t *testing.T) {
	api, srv := newFakeAPI(t, time.Hour)
	dir := t.TempDir()
	go func() {
		for range api.reports {
		}
	}()
	run := func(extra ...string) (Summary, string) {
		t.Helper()
		var out, errs bytes.Buffer
		args := append([]string{"mountsim", "--mounts", "2", "--prefix", "P", "--air", "", "--api", srv.URL,
			"--client-id", "cid", "--client-secret", "csec", "--report-interval", "20ms", "--state-dir", dir,
			"--json", "--duration", "600ms"}, extra...)
		if err := newCommand(&out, &errs, nil).Run(context.Background(), args); err != nil {
			t.Fatalf("%v\n%s", err, errs.String())
		}
		var sum Summary
		if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
			t.Fatal(err)
		}
		return sum, errs.String()
	}
	runOnce := func(extra ...string) Summary {
		t.Helper()
		sum, errs := run(extra...)
		if sum.Errors != 0 || sum.Associated != 2 || sum.SignedReports == 0 || sum.SignedReports != sum.Reports {
			t.Fatalf("summary %+v\n%s", sum, errs)
		}
		return sum
	}
	runOnce("--associate")
	api.mu.Lock()
	first := len(api.counters["P-0001"])
	keys := maps.Clone(api.devices)
	api.mu.Unlock()
	second := runOnce() // no association: the mounts remember their owner
	api.mu.Lock()
	devices, counters := maps.Clone(api.devices), len(api.counters["P-0001"])
	api.mu.Unlock()
	if !maps.Equal(keys, devices) || counters <= first || second.CommandsAccepted != 0 {
		t.Fatalf("keys %v then %v; %d then %d counters", keys, devices, first, counters)
	}
	if files, _ := os.ReadDir(dir); len(files) != 2 {
		t.Fatalf("state files %v", files)
	}
	// The fake API signs no hand-over (as a server without the mounts' keys):
	// mounts that hold an owner key refuse its ASSOCIATE_OWNER, until reset.
	if sum, errs := run("--associate"); sum.Errors != 2 || sum.ErrorsByKind["associate refused "+simmount.ReasonBadHandover] != 2 {
		t.Fatalf("associated without a hand-over: %+v\n%s", sum, errs)
	}
	runOnce("--associate", "--reset-owners")
}

// Phones passing the mounts run the jobs waiting there: every mount
// executes the good job once and refuses the bad one once (a final
// refusal: not offered again), and every receipt reaches the API.
func TestPhonesRunPendingCommands(t *testing.T) {
	api, srv := newFakeAPI(t, time.Hour)
	api.jobs = []fakeJob{
		{id: "job-good", code: "SET_RFID_MODE", params: map[string]string{"rfidMode": "LEARN"}},
		{id: "job-bad", code: "SET_RFID_MODE", params: map[string]string{"rfidMode": "SIDEWAYS"}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	var out, errs bytes.Buffer
	go func() {
		done <- newCommand(&out, &errs, ready).Run(ctx, []string{"mountsim",
			"--mounts", "3", "--prefix", "P", "--air", "", "--api", srv.URL + "/",
			"--client-id", "cid", "--client-secret", "csec", "--report-interval", "1h", "--associate",
			"--phones", "2", "--pass-every", "20ms", "--seed", "7", "--adv-interval", "5ms", "--json"})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("mountsim: %v\n%s", err, errs.String())
	}
	finished := func() int {
		api.mu.Lock()
		defer api.mu.Unlock()
		return len(api.finished)
	}
	for deadline := time.Now().Add(30 * time.Second); finished() < 6; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s, %d of 6 job targets finished\n%s", finished(), errs.String())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var sum Summary
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		t.Fatal(err)
	}
	api.mu.Lock()
	good, bad := api.outcomes["job-good"], api.outcomes["job-bad"]
	api.mu.Unlock()
	if good["EXECUTED"] != 3 || len(good) != 1 || bad["REFUSED"] != 3 || len(bad) != 1 {
		t.Fatalf("receipts by job: good %v, bad %v", good, bad)
	}
	if sum.Errors != 0 || sum.Passes == 0 || sum.JobExecuted != 3 || sum.JobRefused != 3 || sum.JobCommands != 6 || sum.PhoneUploadsQueued != 0 {
		t.Fatalf("summary %+v\n%s", sum, errs.String())
	}
}

// Phones need credentials (they call the API) and a positive pass time.
func TestPhoneFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--phones", "2", "--air", "", "--api", "http://127.0.0.1:1"},
		{"--phones", "1", "--pass-every", "0s", "--air", "", "--client-id", "cid", "--client-secret", "csec"},
		{"--phones", "1001", "--air", ""},
	} {
		var out, errs bytes.Buffer
		err := newCommand(&out, &errs, nil).Run(context.Background(), append([]string{"mountsim", "--mounts", "1", "--duration", "100ms"}, args...))
		if err == nil || !strings.Contains(err.Error(), "phones") && !strings.Contains(err.Error(), "pass-every") {
			t.Errorf("%v: %v, want a refusal naming the flag", args, err)
		}
	}
}
