package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"
)

// Phones install the firmware a rollout offers (INSTALL_FIRMWARE among
// pending-commands) on every mount, through links cut midway; the mounts
// --firmware-failure-rate picks report once on the new revision and then
// roll back (their later signed reports on the old one), the others stay
// on it.
func TestFirmwareInstallsAndRollbacks(t *testing.T) {
	api, srv := newFakeAPI(t, time.Hour)
	img := make([]byte, 3000)
	for i := range img {
		img[i] = byte(i * 3)
	}
	sum := sha256.Sum256(img)
	api.image = img
	api.jobs = []fakeJob{{id: "rollout-1", code: "INSTALL_FIRMWARE",
		params: map[string]string{"revision": "2.0.0", "sha256": hex.EncodeToString(sum[:]), "size": strconv.Itoa(len(img))}}}
	const mounts, rate = 6, 0.5
	// A seed that picks some mounts and leaves others (the choice is
	// deterministic: the same seed, the same mounts).
	var seed uint64
	var failing map[string]bool
	for seed = 1; ; seed++ {
		failing = map[string]bool{}
		n := 0
		for i := 1; i <= mounts; i++ {
			uid, _, _ := identity("F", i)
			if failing[uid] = failsAfterUpdate(seed, uid, rate); failing[uid] {
				n++
			}
		}
		if n >= 2 && n <= mounts-2 {
			break
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	var out, errs bytes.Buffer
	go func() {
		done <- newCommand(&out, &errs, ready).Run(ctx, []string{"mountsim",
			"--mounts", strconv.Itoa(mounts), "--prefix", "F", "--air", "", "--api", srv.URL + "/",
			"--client-id", "cid", "--client-secret", "csec", "--report-interval", "30ms", "--associate",
			"--phones", "2", "--pass-every", "20ms", "--seed", strconv.FormatUint(seed, 10), "--adv-interval", "5ms",
			"--firmware-failure-rate", "0.5", "--drop-link-rate", "0.5", "--json"})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("mountsim: %v\n%s", err, errs.String())
	}
	// Per mount: the revisions of its verified reports, in the mount's
	// order (its counter): phones upload what they carry in any order.
	seen := map[string][]string{}
	said := map[string]map[uint64]string{}
	inOrder := func(uid string) []string {
		counters := slices.Sorted(maps.Keys(said[uid]))
		revs := make([]string, len(counters))
		for i, c := range counters {
			revs[i] = said[uid][c]
		}
		return revs
	}
	settled := func() bool {
		for uid, fails := range failing {
			revs := seen[uid]
			newAt := -1
			for i, r := range revs {
				if r == "2.0.0" && newAt < 0 {
					newAt = i
				}
			}
			switch {
			case newAt < 0:
				return false
			case fails && (revs[len(revs)-1] != "1.0.0" || len(revs)-newAt < 3):
				return false
			case !fails && len(revs)-newAt < 3:
				return false
			}
		}
		return true
	}
	for deadline := time.After(60 * time.Second); !settled(); {
		select {
		case r := <-api.reports:
			if r.verified {
				if said[r.uid] == nil {
					said[r.uid] = map[uint64]string{}
				}
				said[r.uid][r.counter] = r.revision
				seen[r.uid] = inOrder(r.uid)
			}
		case <-deadline:
			brief := map[string]string{}
			for uid, revs := range seen {
				brief[uid] = fmt.Sprintf("%d reports, first on 2.0.0 at %d, last %v", len(revs), slices.Index(revs, "2.0.0"), revs[max(0, len(revs)-4):])
			}
			t.Fatalf("after 60 s: reports by mount %v (failing %v)\n%s", brief, failing, errs.String())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for uid, fails := range failing {
		revs := seen[uid]
		var after []string
		for i, r := range revs {
			if r == "2.0.0" {
				after = revs[i:]
				break
			}
		}
		for i, r := range after[1:] {
			if fails && r != "1.0.0" || !fails && r != "2.0.0" {
				t.Errorf("%s (failing %v): report %d after the update on %s: %v", uid, fails, i+1, r, revs)
				break
			}
		}
	}
	var s Summary
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	nFailing := 0
	for _, f := range failing {
		if f {
			nFailing++
		}
	}
	t.Logf("failing %v; summary: installed %d, links cut %d, no report %d", failing, s.FirmwareInstalled, s.FirmwareLinksCut, s.FirmwareSilent)
	// Every mount's install is told by its receipt, or, when the link
	// dropped as the mount finished (the receipt is lost with it), by its
	// verified report on the new revision. A mount installs again only
	// when a cut link left it to another phone before the outcome was
	// known: at most one more install per cut.
	api.mu.Lock()
	outcomes, told := api.outcomes["rollout-1"], 0
	for uid := range failing {
		if api.finished["rollout-1|"+uid] == "EXECUTED" || api.proved[uid+"|2.0.0"] {
			told++
		}
	}
	api.mu.Unlock()
	if told != mounts || outcomes["REFUSED"] != 0 || int64(outcomes["EXECUTED"]) > mounts+s.FirmwareLinksCut || s.FirmwareFailing != nFailing {
		t.Fatalf("receipts %v, %d of %d mounts told, summary %+v\n%s", outcomes, told, mounts, s, errs.String())
	}
}

func TestFirmwareFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--firmware-failure-rate", "1.5"},
		{"--drop-link-rate", "-0.1"},
		{"--firmware-failure", "explode"},
	} {
		var out, errs bytes.Buffer
		err := newCommand(&out, &errs, nil).Run(context.Background(), append([]string{"mountsim", "--mounts", "1", "--air", "", "--duration", "100ms"}, args...))
		if err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	// The same seed picks the same mounts; about the share asked for.
	n := 0
	for i := range 1000 {
		uid, _, _ := identity("SIM", i+1)
		if failsAfterUpdate(42, uid, 0.2) != failsAfterUpdate(42, uid, 0.2) {
			t.Fatal("not deterministic")
		}
		if failsAfterUpdate(42, uid, 0.2) {
			n++
		}
	}
	if n < 150 || n > 250 {
		t.Errorf("%d of 1000 mounts picked at rate 0.2", n)
	}
}
