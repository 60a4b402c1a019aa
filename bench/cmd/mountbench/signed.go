package main

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"

	"github.com/mountd/mountd/protocol"
)

// signedReport compares the ingest of reports a mount signed (verified
// against the device key pinned at association) with unsigned ones, both
// through mountd, in alternating rounds.
type signedReport struct {
	Batch    int     `json:"batch"`
	Clients  int     `json:"clients"`
	Unsigned phase   `json:"unsigned"`
	Signed   phase   `json:"signed"`
	Ratio    float64 `json:"ratio"` // signed entries/s over unsigned entries/s
	Target   float64 `json:"target"`
	// Verified counts the run's entries stored verified; it must equal
	// the signed phase's accepted entries.
	Verified int64 `json:"verified"`
	Pass     bool  `json:"pass"`
}

// deviceKey is mount uid's simulated device key, the same on every call.
func (b *bench) deviceKey(uid string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("mountbench device key " + b.runID + " " + uid))
	return ed25519.NewKeyFromSeed(seed[:])
}

// pinDeviceKeys gives every mount a device key: a POST /mounts by the owner
// answers ASSOCIATE_OWNER and may bring the mount's key.
func (b *bench) pinDeviceKeys(ctx context.Context) error {
	for _, uid := range b.uids {
		pub := b.deviceKey(uid).Public().(ed25519.PublicKey)
		body, _ := json.Marshal(map[string]string{"uid": uid, "devicePublicKey": hex.EncodeToString(pub)})
		if status, raw, err := b.api(ctx, http.MethodPost, "/api/v1/mounts", body); err != nil || status != http.StatusOK {
			return fmt.Errorf("pin device key of %s: %d %s %v", uid, status, raw, err)
		}
	}
	return nil
}

// postSigned sends the batch as its mount would have signed it.
func (b *bench) postSigned(g *generator) ingestSend {
	keys := make([]ed25519.PrivateKey, len(b.uids))
	for i, uid := range b.uids {
		keys[i] = b.deviceKey(uid)
	}
	counters := make([]atomic.Uint64, len(b.uids))
	post := b.postBody()
	return func(ctx context.Context, w *ingestWorker, ref batchRef) (int, int, string, error) {
		r := protocol.Report{UID: b.uids[ref.mount], Counter: counters[ref.mount].Add(1), SoftwareRevision: "1.0.0",
			Entries: make([]protocol.ReportEntry, ref.n)}
		for i := range ref.n {
			code, value, at := g.entry(ref.first + int64(i))
			r.Entries[i] = protocol.ReportEntry{Code: protocol.StateCode(code), Value: value, OccurredAt: time.UnixMilli(at)}
		}
		sig := protocol.Sign(keys[ref.mount], protocol.BuildReportText(r))
		body := g.appendBody(w.buf[:0], ref)
		body = append(body[:len(body)-1], `,"counter":`...)
		body = strconv.AppendUint(body, r.Counter, 10)
		body = append(body, `,"softwareRevision":"1.0.0","signature":"`...)
		body = append(body, sig...)
		w.buf = append(body, `"}`...)
		return post(ctx, w, ref)
	}
}

// signedScenario pins a device key on every mount, then alternates rounds
// of unsigned and signed ingest (each with entries of its own).
func (b *bench) signedScenario(ctx context.Context) (*signedReport, error) {
	rep := &signedReport{Batch: b.cfg.Batch, Clients: b.cfg.Clients, Target: 0.8}
	if err := b.pinDeviceKeys(ctx); err != nil {
		return nil, err
	}
	gu := newGenerator(b.cfg.Batch, time.Now().Add(-96*time.Hour))
	gs := newGenerator(b.cfg.Batch, time.Now().Add(-48*time.Hour))
	unsigned, signed := b.postStates(gu), b.postSigned(gs)
	b.quiet(ctx)
	if b.cfg.Warmup > 0 {
		b.runIngest(ctx, "unsigned (warm-up)", gu, unsigned, b.cfg.Warmup/2)
		b.runIngest(ctx, "signed (warm-up)", gs, signed, b.cfg.Warmup/2)
	}
	var us, ss []phase
	rounds := b.cfg.roundsOr(4)
	d := b.cfg.Duration / time.Duration(2*rounds)
	for r := range rounds {
		b.logf("signed: round %d of %d, unsigned then signed reports, %s each (load %v)", r+1, rounds, d, loadAvg())
		us = append(us, b.runIngest(ctx, "mountd, unsigned reports", gu, unsigned, d))
		ss = append(ss, b.runIngest(ctx, "mountd, signed reports", gs, signed, d))
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	rep.Unsigned, rep.Signed = mergePhases(us, false), mergePhases(ss, false)
	if rep.Unsigned.EntriesPerSec > 0 {
		rep.Ratio = round(rep.Signed.EntriesPerSec/rep.Unsigned.EntriesPerSec, 3)
	}
	err := b.db.NewRaw("SELECT count(*) FROM mount_states WHERE mount_uid IN (?) AND verified",
		bun.In(b.uids)).Scan(ctx, &rep.Verified)
	if err != nil {
		return nil, fmt.Errorf("count verified entries: %w", err)
	}
	rep.Pass = rep.Ratio >= rep.Target && rep.Signed.Errors == 0 && rep.Unsigned.Errors == 0
	return rep, nil
}
