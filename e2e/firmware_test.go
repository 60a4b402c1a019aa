package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/rest/openapitest"
)

// TestFirmware covers docs/api.md, "Firmware" on both backends.
func TestFirmware(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a := newFleet(in, "A")
			rider := in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:X")
			// One instant for every publish: two versions an hour old must
			// tie (the listing then orders by model), whatever second each
			// publish happens to run in.
			now := time.Now()
			past := func(d time.Duration) string { return now.Add(-d).UTC().Format(time.RFC3339) }

			v100, _ := in.publish(t, "HM-1", "1.0.0", 1000, "--available-since", past(72*time.Hour))
			in.publish(t, "HM-1", "1.1.0", 1000, "--available-since", past(48*time.Hour), "--mandatory")
			v120, bin120 := in.publish(t, "HM-1", "1.2.0", 4<<20, "--available-since", past(24*time.Hour))
			in.publish(t, "HM-1", "1.10.0", 1000, "--available-since", past(time.Hour))
			in.publish(t, "HM-1", "2.0.0", 1000, "--available-since", past(-time.Hour)) // not yet visible
			in.publish(t, "HM-2", "0.9.0", 1000, "--available-since", past(time.Hour))
			if v100.Size != 1000 || len(v100.SHA256) != 64 || v120.SHA256 != sha256hex(bin120) {
				t.Fatalf("publish answers %+v %+v", v100, v120)
			}
			in.runCLI("firmware", "deprecate", "--model", "HM-1", "--revision", "1.10.0")

			// versions: newest availableSince first, future invisible, deprecated listed
			list := decode[struct {
				Versions   []versionView  `json:"versions"`
				Pagination map[string]int `json:"pagination"`
			}](t, a.ok(t, http.MethodGet, "/api/v1/firmware/versions", nil))
			revs := []string{}
			for _, v := range list.Versions {
				revs = append(revs, v.ModelNumber+"@"+v.SoftwareRevision+fmt.Sprint(map[bool]string{true: "(d)"}[v.Deprecated]))
			}
			if strings.Join(revs, " ") != "HM-1@1.10.0(d) HM-2@0.9.0 HM-1@1.2.0 HM-1@1.1.0 HM-1@1.0.0" || list.Pagination["pageSize"] != 10 {
				t.Fatalf("versions %v %v", revs, list.Pagination)
			}
			if l := decode[map[string]any](t, a.ok(t, http.MethodGet, "/api/v1/firmware/versions?modelNumber=nope", nil)); l["pagination"].(map[string]any)["totalItems"] != 0.0 {
				t.Fatalf("unknown model listing %v", l)
			}

			// check-update: latest candidate is 1.2.0 (1.10.0 deprecated, 2.0.0 in the future)
			cases := []struct {
				query, code, version string
			}{
				{"modelNumber=HM-1", "MANDATORY_UPDATE", "1.2.0"}, // a mandatory version exists above "nothing"
				{"modelNumber=HM-1&softwareRevision=1.0.0", "MANDATORY_UPDATE", "1.2.0"},
				{"modelNumber=HM-1&softwareRevision=1.1.0", "UPDATE_AVAILABLE", "1.2.0"},
				{"modelNumber=HM-1&softwareRevision=1.2.0", "UP_TO_DATE", ""},
				{"modelNumber=HM-1&softwareRevision=1.10.0", "UP_TO_DATE", ""},
				{"modelNumber=HM-1&softwareRevision=3.0.0", "UP_TO_DATE", ""},
				{"modelNumber=HM-2&softwareRevision=0.8.0", "UPDATE_AVAILABLE", "0.9.0"},
			}
			for _, c := range cases {
				res, raw := in.call(http.MethodGet, "/api/v1/firmware/check-update?"+c.query, rider, nil)
				got := decode[map[string]any](t, raw)
				_, hasVersion := got["version"]
				if res.StatusCode != 200 || got["code"] != c.code || hasVersion != (c.version != "") ||
					(hasVersion && got["version"].(map[string]any)["softwareRevision"] != c.version) {
					t.Errorf("check-update %s: %d %s; want %s %s", c.query, res.StatusCode, raw, c.code, c.version)
				}
			}
			// a deprecated current revision must update
			in.runCLI("firmware", "deprecate", "--model", "HM-1", "--revision", "1.1.0")
			if got := decode[map[string]any](t, a.ok(t, http.MethodGet, "/api/v1/firmware/check-update?modelNumber=HM-1&softwareRevision=1.1.0", nil)); got["code"] != "MANDATORY_UPDATE" {
				t.Fatalf("deprecated current: %v", got)
			}

			// errors
			for q, want := range map[string][2]string{
				"":                                       {"400", "VALIDATION_FAILED"},
				"?modelNumber=HM-9":                      {"404", "FIRMWARE_NOT_FOUND"},
				"?modelNumber=HM-1&softwareRevision=abc": {"400", "VALIDATION_FAILED"},
			} {
				for _, ep := range []string{"check-update", "download"} {
					res, raw := a.call(http.MethodGet, "/api/v1/firmware/"+ep+q, nil)
					status := map[string]int{"400": 400, "404": 404}[want[0]]
					wantProblem(t, res, raw, status, want[1])
				}
			}
			res, raw := a.call(http.MethodGet, "/api/v1/firmware/download?modelNumber=HM-1&softwareRevision=2.0.0", nil)
			wantProblem(t, res, raw, 404, "FIRMWARE_NOT_FOUND")

			// download: the latest candidate, its bytes, Range, ETag
			d := decode[struct {
				Version      versionView `json:"version"`
				DownloadLink string      `json:"downloadLink"`
				ExpiresAt    string      `json:"expiresAt"`
			}](t, a.ok(t, http.MethodGet, "/api/v1/firmware/download?modelNumber=HM-1", nil))
			exp, _ := time.Parse(time.RFC3339, d.ExpiresAt)
			if d.Version.SoftwareRevision != "1.2.0" || time.Until(exp) < 14*time.Minute || time.Until(exp) > 16*time.Minute {
				t.Fatalf("download %+v", d)
			}
			res, body := get(t, d.DownloadLink, nil)
			if res.StatusCode != 200 || sha256hex(body) != v120.SHA256 || res.Header.Get("ETag") == "" {
				t.Fatalf("blob: %d, %d bytes, etag %q", res.StatusCode, len(body), res.Header.Get("ETag"))
			}
			res, body = get(t, d.DownloadLink, http.Header{"Range": {"bytes=100-199"}})
			if res.StatusCode != 206 || string(body) != string(bin120[100:200]) {
				t.Fatalf("range: %d, %d bytes", res.StatusCode, len(body))
			}
			res, _ = get(t, d.DownloadLink, http.Header{"If-None-Match": {res.Header.Get("ETag")}})
			if res.StatusCode != 304 {
				t.Fatalf("If-None-Match: %d", res.StatusCode)
			}
			// a deprecated version by exact revision
			old := decode[map[string]any](t, a.ok(t, http.MethodGet, "/api/v1/firmware/download?modelNumber=HM-1&softwareRevision=1.10.0", nil))
			if old["version"].(map[string]any)["deprecated"] != true {
				t.Fatalf("deprecated download %v", old)
			}

			// any change to the link is refused
			u, _ := url.Parse(d.DownloadLink)
			q := u.Query()
			tamper := map[string]func() string{
				"path": func() string { v := *u; v.Path = strings.Replace(u.Path, "1.2.0", "1.0.0", 1); return v.String() },
				"expiry": func() string {
					v := *u
					q2 := url.Values{}
					q2.Set("expires", fmt.Sprint(exp.Unix()+3600))
					q2.Set("signature", q.Get("signature"))
					v.RawQuery = q2.Encode()
					return v.String()
				},
				"signature": func() string {
					v := *u
					q2 := url.Values{}
					q2.Set("expires", q.Get("expires"))
					q2.Set("signature", strings.Repeat("0", 64))
					v.RawQuery = q2.Encode()
					return v.String()
				},
				"no query": func() string { v := *u; v.RawQuery = ""; return v.String() },
			}
			for name, link := range tamper {
				res, raw := get(t, link(), nil)
				if res.StatusCode != 403 {
					t.Errorf("tampered %s: %d %.200s", name, res.StatusCode, raw)
				}
			}
		})
	}
}

func get(t *testing.T, link string, h http.Header) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, link, nil)
	for k, v := range h {
		req.Header[k] = v
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	openapitest.New(t).Check(t, req, res, body)
	return res, body
}

func sha256hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestExpiredDownloadLink: a link past its expiry is refused.
func TestExpiredDownloadLink(t *testing.T) {
	cfg := testConfig(t.TempDir(), "")
	cfg.DownloadTTL = time.Second
	in := start(t, cfg)
	a := newFleet(in, "A")
	in.publish(t, "HM-1", "1.0.0", 100)
	d := decode[map[string]any](t, a.ok(t, http.MethodGet, "/api/v1/firmware/download?modelNumber=HM-1", nil))
	link := d["downloadLink"].(string)
	if res, _ := get(t, link, nil); res.StatusCode != 200 {
		t.Fatalf("fresh link: %d", res.StatusCode)
	}
	time.Sleep(2100 * time.Millisecond)
	if res, _ := get(t, link, nil); res.StatusCode != 403 {
		t.Fatalf("expired link: %d", res.StatusCode)
	}
}

// TestPublishRefusals: bad revisions and duplicates leave nothing behind.
func TestPublishRefusals(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			cfg := newConfig(t)
			in := start(t, cfg)
			in.publish(t, "HM-1", "1.0.0", 100)
			path := filepath.Join(t.TempDir(), "fw.bin")
			_ = os.WriteFile(path, []byte("x"), 0o600)
			for _, rev := range []string{"1.0", "v1.0.0", "latest", "1.0.0"} {
				if _, _, err := in.tryCLI(in.publishArgs("--model", "HM-1", "--revision", rev, "--file", path)...); err == nil {
					t.Errorf("publish %s succeeded", rev)
				}
			}
			blobs, _ := filepath.Glob(filepath.Join(cfg.DataDir, "blobs", "firmware", "HM-1", "*"))
			if len(blobs) != 1 {
				t.Fatalf("blob files after refused publishes: %v (want only the first)", blobs)
			}
		})
	}
}

// TestFirmwareOnLocalDiskRefused: publishing to this machine's disk while
// the catalogue is in PostgreSQL (which other replicas share) is refused
// with what to do (docs/operations.md, "Configuration that matters in production"); --local-blobs stores it anyway
// and warns that other replicas cannot serve the file. On the embedded
// default, where one process serves everything, it says nothing.
func TestFirmwareOnLocalDiskRefused(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			path := filepath.Join(t.TempDir(), "fw.bin")
			if err := os.WriteFile(path, []byte("firmware image"), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"firmware", "publish", "--model", "HM-9", "--revision", "1.0.0", "--file", path}
			shared := in.cfg.OnPostgres()
			_, stderr, err := in.tryCLI(args...)
			if shared {
				if err == nil || !strings.Contains(err.Error(), "MOUNTD_BLOB_URL") || !strings.Contains(err.Error(), "--local-blobs") {
					t.Fatalf("publish to the local disk on PostgreSQL: %v (want a refusal naming MOUNTD_BLOB_URL and --local-blobs)", err)
				}
				if blobs, _ := filepath.Glob(filepath.Join(in.cfg.DataDir, "blobs", "firmware", "HM-9", "*")); len(blobs) != 0 {
					t.Errorf("a refused publish stored %v", blobs)
				}
				_, stderr, err = in.tryCLI(append(args[:2:2], append([]string{"--local-blobs"}, args[2:]...)...)...)
			}
			if err != nil {
				t.Fatalf("publish: %v\n%s", err, stderr)
			}
			warned := strings.Contains(stderr, "MOUNTD_BLOB_URL") && strings.Contains(stderr, "other replicas")
			if warned != shared {
				t.Errorf("on %s, publish warned %v (want %v): %q", name, warned, shared, stderr)
			}
		})
	}
}
