package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// rulesReport compares ingest while the account has 10 enabled alarm rules
// with ingest while it has none enabled, in alternating rounds on the same
// server and mounts (the rules are disabled and enabled between rounds).
type rulesReport struct {
	Steady  bool    `json:"steady"` // values in a band (no rule's state changes)
	Batch   int     `json:"batch"`
	Clients int     `json:"clients"`
	Rules   int     `json:"rules"`
	None    phase   `json:"none"`
	With    phase   `json:"with"`
	Ratio   float64 `json:"ratio"` // with rules over without, entries/s
	Target  float64 `json:"target"`
	Pass    bool    `json:"pass"`
}

// benchRules are the ten rules: the four starting rules an account is
// offered and six more of the same kinds, with thresholds the generated
// values cross now and then (batteries cycle 0-100, temperatures -60-150).
var benchRules = []map[string]any{
	{"name": "battery low", "severity": "WARNING", "conditions": []any{cond("BATTERY_LEVEL", "<", "20")}, "forSeconds": 0},
	{"name": "silent for an hour", "severity": "WARNING", "conditions": []any{map[string]any{"presence": "OFFLINE"}}, "forSeconds": 2700},
	{"name": "helmet absent while locked", "severity": "CRITICAL", "conditions": []any{cond("MOUNT_LOCKED", "==", "1"), cond("HELMET_MOUNTED", "==", "0")}, "forSeconds": 600},
	{"name": "CPU hot", "severity": "WARNING", "conditions": []any{cond("CPU_TEMPERATURE", ">", "70")}, "forSeconds": 300},
	{"name": "battery critical", "severity": "CRITICAL", "conditions": []any{cond("BATTERY_LEVEL", "<=", "5")}, "forSeconds": 0},
	{"name": "CPU very hot", "severity": "CRITICAL", "conditions": []any{cond("CPU_TEMPERATURE", ">=", "120")}, "forSeconds": 60},
	{"name": "frozen", "severity": "INFO", "conditions": []any{cond("CPU_TEMPERATURE", "<", "-40")}, "forSeconds": 600},
	{"name": "unlocked, helmet gone", "severity": "INFO", "conditions": []any{cond("MOUNT_LOCKED", "==", "0"), cond("HELMET_MOUNTED", "==", "0")}, "forSeconds": 1800},
	{"name": "battery full", "severity": "INFO", "conditions": []any{cond("BATTERY_LEVEL", "==", "100")}, "forSeconds": 3600},
	{"name": "unlocked and low", "severity": "WARNING", "conditions": []any{cond("MOUNT_LOCKED", "!=", "1"), cond("BATTERY_LEVEL", "<", "10")}, "forSeconds": 120},
}

func cond(code, op, value string) map[string]any {
	return map[string]any{"code": code, "op": op, "value": value}
}

// setRules enables or disables every rule.
func (b *bench) setRules(ctx context.Context, ids []string, enabled bool) error {
	for _, id := range ids {
		body, _ := json.Marshal(map[string]any{"enabled": enabled})
		if status, raw, err := b.api(ctx, http.MethodPatch, "/api/v1/alarm-rules/"+id, body); err != nil || status != http.StatusOK {
			return fmt.Errorf("PATCH alarm rule %s: %d %s %v", id, status, raw, err)
		}
	}
	return nil
}

// rulesScenario creates the ten rules, then alternates rounds without and
// with them enabled.
func (b *bench) rulesScenario(ctx context.Context) (*rulesReport, error) {
	rep := &rulesReport{Batch: b.cfg.Batch, Clients: b.cfg.Clients, Rules: len(benchRules), Target: 0.9}
	var ids []string
	for _, r := range benchRules {
		body, _ := json.Marshal(r)
		status, raw, err := b.api(ctx, http.MethodPost, "/api/v1/alarm-rules", body)
		if err != nil || status != http.StatusOK {
			return nil, fmt.Errorf("POST alarm rule %v: %d %s %v", r["name"], status, raw, err)
		}
		var rule struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(raw, &rule); err != nil {
			return nil, err
		}
		ids = append(ids, rule.ID)
	}
	g := newGenerator(b.cfg.Batch, time.Now().Add(-48*time.Hour))
	g.steady = b.cfg.Steady
	rep.Steady = g.steady
	send := b.postStates(g)
	b.quiet(ctx)
	if b.cfg.Warmup > 0 {
		b.runIngest(ctx, "warm-up", g, send, b.cfg.Warmup)
	}
	var none, with []phase
	rounds := b.cfg.roundsOr(4)
	d := b.cfg.Duration / time.Duration(2*rounds)
	for r := range rounds {
		b.logf("rules: round %d of %d, without then with %d rules, %s each (load %v)", r+1, rounds, len(ids), d, loadAvg())
		if err := b.setRules(ctx, ids, false); err != nil {
			return nil, err
		}
		none = append(none, b.runIngest(ctx, "mountd, no rule enabled", g, send, d))
		if err := b.setRules(ctx, ids, true); err != nil {
			return nil, err
		}
		with = append(with, b.runIngest(ctx, fmt.Sprintf("mountd, %d rules", len(ids)), g, send, d))
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	rep.None, rep.With = mergePhases(none, false), mergePhases(with, false)
	if rep.None.EntriesPerSec > 0 {
		rep.Ratio = round(rep.With.EntriesPerSec/rep.None.EntriesPerSec, 3)
	}
	rep.Pass = rep.Ratio >= rep.Target && rep.None.Errors == 0 && rep.With.Errors == 0
	return rep, nil
}
