package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/testenv"
)

// TestAlarmsWhenAReplicaDies: two replicas on PostgreSQL and Redis. A
// report through replica A makes a held condition true (battery below 20
// for 4 s) and the mount then goes silent (offline after 3 s); A is killed
// (SIGKILL) before either is due. Replica B alone raises the battery alarm
// and announces MOUNT_OFFLINE, each exactly once and within the 30 s
// bound, and the presence rule's alarm once.
func TestAlarmsWhenAReplicaDies(t *testing.T) {
	t.Parallel() // it waits for the dead replica's lease: other waits overlap
	dbURL := testenv.PostgresURL(t)
	redisURL, _ := testenv.RedisURL(t)
	addrA, addrB := freeAddr(t), freeAddr(t)
	env := replicaEnv(t, dbURL, redisURL, "http://"+addrA, "MOUNTD_OFFLINE_AFTER=3s")
	a := startProc(t, addrA, env)
	b := startProc(t, addrB, env)
	onA, creds := a.ownerClient(t, "Alarm fleet")
	onB := b.clientFor(creds)
	ctx := context.Background()
	uid := "AR-1"
	associate(t, onA, uid)
	for _, rule := range []map[string]any{
		{"name": "battery low for 4 s", "severity": "WARNING", "forSeconds": 4,
			"conditions": []any{map[string]any{"code": "BATTERY_LEVEL", "op": "<", "value": "20"}}},
		{"name": "silent", "severity": "CRITICAL", "forSeconds": 0, "conditions": []any{map[string]any{"presence": "OFFLINE"}}},
	} {
		if err := onA.Do(ctx, http.MethodPost, "/alarm-rules", rule, nil); err != nil {
			t.Fatal(err)
		}
	}
	var start alarmEventPage
	if err := onB.Do(ctx, http.MethodGet, "/events?limit=1", nil, &start); err != nil {
		t.Fatal(err)
	}
	if err := onA.Do(ctx, http.MethodPost, "/mounts/"+uid+"/states", map[string]any{"states": []any{
		map[string]any{"code": "BATTERY_LEVEL", "value": "12", "occurredAt": time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano)}}}, nil); err != nil {
		t.Fatal(err)
	}
	reported := time.Now()
	a.kill()

	counts := map[string]int{}
	after := start.Next
	for time.Since(reported) < 40*time.Second {
		var page alarmEventPage
		q := url.Values{"after": {after}, "wait": {"2"}, "mountUid": {uid}, "types": {"ALARM_RAISED,MOUNT_OFFLINE"}}
		if err := onB.Do(ctx, http.MethodGet, "/events?"+q.Encode(), nil, &page); err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Events {
			key := e.Type
			if e.Alarm != nil {
				key += " " + e.Alarm.RuleName
			}
			counts[key]++
		}
		after = page.Next
		if counts["ALARM_RAISED battery low for 4 s"] >= 1 && counts["MOUNT_OFFLINE"] >= 1 && counts["ALARM_RAISED silent"] >= 1 &&
			time.Since(reported) > 10*time.Second {
			break // a second of either would have come by now
		}
	}
	if elapsed := time.Since(reported); elapsed > 4*time.Second+30*time.Second+5*time.Second {
		t.Errorf("the events came %s after the report", elapsed)
	}
	want := map[string]int{"ALARM_RAISED battery low for 4 s": 1, "MOUNT_OFFLINE": 1, "ALARM_RAISED silent": 1}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Fatalf("events from the surviving replica: %v, want %v", counts, want)
	}
}

// alarmEventPage is the part of a GET /api/v1/events page read here.
type alarmEventPage struct {
	Events []struct {
		Type  string `json:"type"`
		Alarm *struct {
			RuleName string `json:"ruleName"`
		} `json:"alarm"`
	} `json:"events"`
	Next string `json:"next"`
}
