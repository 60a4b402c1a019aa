package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// feedEvent is the part of a feed event (GET /events) checked here.
type feedEvent struct {
	ID         string    `json:"id"`
	Type       string    `json:"type"`
	OccurredAt time.Time `json:"occurredAt"`
	UID        *string   `json:"uid"`
	States     []struct {
		Code       string    `json:"code"`
		Value      string    `json:"value"`
		OccurredAt time.Time `json:"occurredAt"`
	} `json:"states"`
	Alarm *struct {
		ID     string `json:"id"`
		RuleID string `json:"ruleId"`
	} `json:"alarm"`
}

// uid is the event's mount ("" for account-level events).
func (e feedEvent) uid() string {
	if e.UID == nil {
		return ""
	}
	return *e.UID
}

type jobView struct {
	ID      string         `json:"id"`
	State   string         `json:"state"`
	Targets int            `json:"targets"`
	Counts  map[string]int `json:"counts"`
}

type rolloutView struct {
	ID           string         `json:"id"`
	State        string         `json:"state"`
	PausedReason *string        `json:"pausedReason"`
	OpenPhase    int            `json:"openPhase"`
	Targets      int            `json:"targets"`
	Counts       map[string]int `json:"counts"`
}

// readFeed reads the event log after the cursor to its head.
func (d *deployment) readFeed(ctx context.Context, after string) ([]feedEvent, string, error) {
	var all []feedEvent
	for {
		var page struct {
			Events []feedEvent `json:"events"`
			Next   string      `json:"next"`
		}
		q := url.Values{"after": {after}, "limit": {"1000"}}
		if err := withRetries(ctx, func() error { return d.api.Do(ctx, http.MethodGet, "/events?"+q.Encode(), nil, &page) }); err != nil {
			return nil, "", fmt.Errorf("read the feed: %w", err)
		}
		all = append(all, page.Events...)
		if len(page.Events) == 0 {
			return all, after, nil
		}
		after = page.Next
	}
}

// due is what subscriber s must have received of the feed: the mount
// events (account-level ones go to accountEvents) of its mounts.
func (s *subscriber) due(e feedEvent) bool {
	if s.feed {
		return true
	}
	uid := e.uid()
	return uid != "" && (s.uids == nil || contains(s.uids, uid))
}

// subsCaughtUp tells whether every subscriber received the last event of
// the feed it is due.
func subsCaughtUp(subs []*subscriber, feed []feedEvent) bool {
	for _, s := range subs {
		last := ""
		for i := len(feed) - 1; i >= 0; i-- {
			if s.due(feed[i]) {
				last = feed[i].ID
				break
			}
		}
		if last == "" {
			continue
		}
		received, _, _ := s.snapshot()
		if !contains(received, last) {
			return false
		}
	}
	return true
}

// hooksCaughtUp tells whether each receiver has every event of the feed
// its webhook selects.
func hooksCaughtUp(hooks []hookSpec, feed []feedEvent) bool {
	for _, h := range hooks {
		got, _, _ := h.rcv.snapshot()
		for _, e := range feed {
			if h.wants(e) && got[e.ID] == 0 {
				return false
			}
		}
	}
	return true
}

// check is one count of the summary: must it be 0, and is it.
type check struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
	Of    int    `json:"of"` // what was checked (0: not a count of items)
	Zero  bool   `json:"mustBeZero"`
	Note  string `json:"note,omitempty"`
}

type ownRow struct {
	Acknowledged int64 `json:"acknowledged"`
	GivenUp      int64 `json:"givenUp"`
	Retries      int64 `json:"retries"`
}

type report struct {
	Command          string                     `json:"command"`
	Started          time.Time                  `json:"started"`
	LoadSeconds      float64                    `json:"loadSeconds"`
	Mounts           int                        `json:"mounts"`
	OwnMounts        int                        `json:"ownMounts"`
	Subscribers      int                        `json:"subscribers"`
	FullSubscribers  int                        `json:"fullSubscribers"`
	Replicas         int                        `json:"replicas"`
	ReadReplica      bool                       `json:"readReplica"`
	HealthWindow     string                     `json:"healthWindow"`
	Kills            int                        `json:"replicaKills"`
	Crashes          int                        `json:"replicaCrashes"`
	Faults           []faultRow                 `json:"faults"`
	FeedEvents       int                        `json:"feedEvents"`
	Own              ownRow                     `json:"ownReports"`
	Reconnects       map[string]int             `json:"reconnects"`
	ReconnectReasons map[string]int             `json:"reconnectReasons"`
	WebhookDups      map[string]int             `json:"webhookDuplicates"`
	Job              jobView                    `json:"job"`
	Rollout          rolloutView                `json:"rollout"`
	JobCreatedAt     float64                    `json:"jobCreatedAtSeconds"`
	JobEndedAt       float64                    `json:"jobCompletedAtSeconds"`
	RolloutCreatedAt float64                    `json:"rolloutCreatedAtSeconds"`
	RolloutEndedAt   float64                    `json:"rolloutCompletedAtSeconds"`
	Statuses         map[string]int             `json:"ownRequestStatuses"`
	NginxStatuses    map[string]int             `json:"nginxStatuses"`
	Checks           []check                    `json:"checks"`
	Examples         map[string][]string        `json:"examples,omitempty"`
	Mountsim         map[string]json.RawMessage `json:"mountsim"`
	LogDir           string                     `json:"logDir"`
}

func (r *report) add(c check, examples ...string) {
	r.Checks = append(r.Checks, c)
	if len(examples) > 0 {
		if r.Examples == nil {
			r.Examples = map[string][]string{}
		}
		r.Examples[c.Name] = examples[:min(len(examples), 5)]
	}
}

func (r *report) failed() bool {
	for _, c := range r.Checks {
		if c.Zero && c.Count != 0 {
			return true
		}
	}
	return false
}

// reconcile makes the checks from outside, through the API (and nginx's
// access log and the replicas' logs for 500s and panics).
func (d *deployment) reconcile(ctx context.Context, r *report, rep *reporters, feed, later []feedEvent, subs []*subscriber,
	hooks []hookSpec, job jobView, ro rolloutView, ruleID string) error {
	known := map[string]int{} // id → position in the feed
	dupFeed := 0
	var dupIDs []string
	for i, e := range append(append([]feedEvent(nil), feed...), later...) {
		if _, ok := known[e.ID]; ok {
			dupFeed++
			dupIDs = append(dupIDs, e.ID)
			continue
		}
		known[e.ID] = i
	}
	all := append(append([]feedEvent(nil), feed...), later...)
	r.FeedEvents = len(all)
	r.add(check{Name: "feed: events twice in the log", Count: dupFeed, Of: len(all), Zero: true}, dupIDs...)

	// Acknowledged reports: in the history and in exactly one STATES_REPORTED.
	inEvents := map[entryKey]int{}
	for _, e := range all {
		if e.Type != "STATES_REPORTED" {
			continue
		}
		for _, s := range e.States {
			inEvents[entryKey{e.uid(), s.Code, s.OccurredAt.UnixMilli()}]++
		}
	}
	history, err := d.histories(ctx, r.Started.Add(-time.Minute))
	if err != nil {
		return err
	}
	var noHistory, noEvent, twice []string
	for k, v := range rep.acked {
		got, ok := history[k]
		if !ok || !sameValue(got, v) {
			noHistory = append(noHistory, fmt.Sprintf("%s %s %d sent %s stored %q", k.UID, k.Code, k.AtMs, v, got))
		}
		switch inEvents[k] {
		case 0:
			noEvent = append(noEvent, fmt.Sprintf("%s %s %d", k.UID, k.Code, k.AtMs))
		case 1:
		default:
			twice = append(twice, fmt.Sprintf("%s %s %d in %d events", k.UID, k.Code, k.AtMs, inEvents[k]))
		}
	}
	sort.Strings(noHistory)
	sort.Strings(noEvent)
	r.add(check{Name: "acknowledged entries missing from the history", Count: len(noHistory), Of: len(rep.acked), Zero: true}, noHistory...)
	r.add(check{Name: "acknowledged entries without their STATES_REPORTED event", Count: len(noEvent), Of: len(rep.acked), Zero: true}, noEvent...)
	r.add(check{Name: "acknowledged entries in more than one event", Count: len(twice), Of: len(rep.acked), Zero: true}, twice...)

	// Subscriptions and feed followers: each due event once.
	var graphql, followers []*subscriber
	for _, sub := range subs {
		if sub.feed {
			followers = append(followers, sub)
		} else {
			graphql = append(graphql, sub)
		}
	}
	r.Reconnects, r.ReconnectReasons = map[string]int{}, map[string]int{}
	r.onceEach("subscriptions", graphql, feed, known)
	r.onceEach("feed followers", followers, feed, known)

	// Webhooks: every selected event at least once.
	r.WebhookDups = map[string]int{}
	for _, h := range hooks {
		got, badSig, malformed := h.rcv.snapshot()
		lost, wanted, dups := 0, 0, 0
		var ex []string
		for _, e := range feed {
			if !h.wants(e) {
				continue
			}
			wanted++
			if got[e.ID] == 0 {
				lost++
				ex = append(ex, fmt.Sprintf("%s %s %s", e.ID, e.Type, e.uid()))
			}
		}
		for _, n := range got {
			if n > 1 {
				dups += n - 1
			}
		}
		r.WebhookDups[h.name] = dups
		r.add(check{Name: "webhook " + h.name + ": events never delivered", Count: lost, Of: wanted, Zero: true,
			Note: fmt.Sprintf("%d duplicate deliveries (allowed)", dups)}, ex...)
		r.add(check{Name: "webhook " + h.name + ": bad signatures or bodies", Count: badSig + malformed, Zero: true})
	}

	// The job and the rollout, and when they completed (in the run).
	r.Job, r.Rollout = job, ro
	for _, e := range all {
		switch e.Type {
		case "JOB_COMPLETED":
			r.JobEndedAt = e.OccurredAt.Sub(r.Started).Round(time.Second).Seconds()
		case "ROLLOUT_COMPLETED":
			r.RolloutEndedAt = e.OccurredAt.Sub(r.Started).Round(time.Second).Seconds()
		}
	}
	unfinished := 0
	if job.State != "COMPLETED" || job.Counts["executed"]+job.Counts["refused"] != job.Targets {
		unfinished++
	}
	r.add(check{Name: "job not completed with every target decided", Count: unfinished, Of: 1, Zero: true,
		Note: fmt.Sprintf("%s, %d targets, counts %v", job.State, job.Targets, job.Counts)})
	unfinished = 0
	if ro.State != "COMPLETED" {
		unfinished++
	}
	r.add(check{Name: "rollout not completed", Count: unfinished, Of: 1, Zero: true,
		Note: fmt.Sprintf("%s, phase %d, %d targets, counts %v", ro.State, ro.OpenPhase, ro.Targets, ro.Counts)})

	// Alarms: one raise per episode, and the state matching the battery.
	raises := map[string]int{}
	open := map[string]bool{} // rule/uid → an alarm raised and not cleared
	doubleEpisode, raised := 0, 0
	var exEpisode []string
	for _, e := range all {
		if e.Alarm == nil || e.Alarm.RuleID != ruleID {
			continue
		}
		key := e.Alarm.RuleID + "/" + e.uid()
		switch e.Type {
		case "ALARM_RAISED":
			raised++
			raises[e.Alarm.ID]++
			if open[key] {
				doubleEpisode++
				exEpisode = append(exEpisode, fmt.Sprintf("%s: %s raised while %s open", e.uid(), e.Alarm.ID, key))
			}
			open[key] = true
		case "ALARM_CLEARED":
			open[key] = false
		}
	}
	doubleRaise := 0
	for id, n := range raises {
		if n > 1 {
			doubleRaise += n - 1
			exEpisode = append(exEpisode, fmt.Sprintf("alarm %s raised %d times", id, n))
		}
	}
	r.add(check{Name: "alarms raised twice for one episode", Count: doubleEpisode + doubleRaise, Of: raised, Zero: true}, exEpisode...)
	mismatch, err := d.alarmMismatch(ctx, ruleID)
	if err != nil {
		return err
	}
	r.add(check{Name: "own mounts whose ACTIVE alarm disagrees with their battery", Count: len(mismatch), Of: len(d.uidsOwn), Zero: true}, mismatch...)

	stuck, checked, err := d.stuckCommands(ctx)
	if err != nil {
		return err
	}
	r.add(check{Name: "commands ISSUED past their expiresAt (+30 s)", Count: len(stuck), Of: checked, Zero: true}, stuck...)

	r.NginxStatuses, err = nginxStatuses(filepath.Join(d.dir, "nginx", "access.log"))
	if err != nil {
		return err
	}
	r.add(check{Name: "answers 500 (nginx's access log)", Count: r.NginxStatuses["500"], Of: sumValues(r.NginxStatuses), Zero: true})
	panics := 0
	for _, rp := range d.replicas {
		panics += countLines(rp.logPath, "panic:")
	}
	r.add(check{Name: "panics in the replicas' logs", Count: panics, Zero: true})
	errorLines, warnLines := 0, 0
	for _, rp := range d.replicas {
		errorLines += countLines(rp.logPath, "level=ERROR")
		warnLines += countLines(rp.logPath, "level=WARN")
	}
	r.add(check{Name: "error lines in the replicas' logs", Count: errorLines, Note: fmt.Sprintf("and %d warnings; expected around the faults", warnLines)})
	return nil
}

// onceEach checks that each of subs received every feed event it is due
// once, and nothing else.
func (r *report) onceEach(label string, subs []*subscriber, feed []feedEvent, known map[string]int) {
	var missing, doubled, phantom, outOfOrder, due, affected int
	var exMissing, exDoubled, exPhantom []string
	for _, s := range subs {
		received, reconnects, lastErr := s.snapshot()
		r.Reconnects[label] += reconnects
		s.mu.Lock()
		for reason, n := range s.reasons {
			r.ReconnectReasons[reason] += n
		}
		s.mu.Unlock()
		count := map[string]int{}
		last := -1
		bad := false
		for _, id := range received {
			count[id]++
			pos, ok := known[id]
			switch {
			case !ok:
				phantom++
				bad = true
				exPhantom = append(exPhantom, fmt.Sprintf("subscriber %d: %s", s.n, id))
			case pos < last:
				outOfOrder++
			default:
				last = pos
			}
		}
		for id, n := range count {
			if n > 1 {
				doubled += n - 1
				bad = true
				exDoubled = append(exDoubled, fmt.Sprintf("subscriber %d: %s %d times (reconnects %d, last error %s)", s.n, id, n, reconnects, lastErr))
			}
		}
		for _, e := range feed {
			if s.due(e) {
				due++
				if count[e.ID] == 0 {
					missing++
					bad = true
					exMissing = append(exMissing, fmt.Sprintf("subscriber %d: %s %s %s (reconnects %d, last error %s)", s.n, e.ID, e.Type, e.uid(), reconnects, lastErr))
				}
			}
		}
		if bad {
			affected++
		}
	}
	r.add(check{Name: label + ": feed events missing", Count: missing, Of: due, Zero: true}, exMissing...)
	r.add(check{Name: label + ": events received twice", Count: doubled, Of: due, Zero: true}, exDoubled...)
	r.add(check{Name: label + ": events not in the feed", Count: phantom, Zero: true}, exPhantom...)
	r.add(check{Name: label + ": events out of the log's order", Count: outOfOrder, Of: due, Note: "per mount order is what §9 promises"})
	r.add(check{Name: label + " with any of the above", Count: affected, Of: len(subs), Zero: true})
}

// sameValue compares a stored value with the one sent, as numbers.
func sameValue(stored, sent string) bool {
	a, errA := strconv.ParseFloat(stored, 64)
	b, errB := strconv.ParseFloat(sent, 64)
	return errA == nil && errB == nil && a == b
}

// histories reads the own mounts' state history since from, 8 at a time.
func (d *deployment) histories(ctx context.Context, from time.Time) (map[entryKey]string, error) {
	out := map[entryKey]string{}
	var mu sync.Mutex
	err := d.eachMount(d.uidsOwn, func(uid string) error {
		for page := 1; ; page++ {
			var p struct {
				States []struct {
					Code       string    `json:"code"`
					Value      string    `json:"value"`
					OccurredAt time.Time `json:"occurredAt"`
				} `json:"states"`
				Pagination struct {
					TotalPages int `json:"totalPages"`
				} `json:"pagination"`
			}
			q := url.Values{"from": {from.Format(time.RFC3339Nano)}, "pageSize": {"100"}, "currentPage": {strconv.Itoa(page)}}
			if err := withRetries(ctx, func() error { return d.api.Do(ctx, http.MethodGet, "/mounts/"+uid+"/states?"+q.Encode(), nil, &p) }); err != nil {
				return fmt.Errorf("%s history: %w", uid, err)
			}
			mu.Lock()
			for _, s := range p.States {
				out[entryKey{uid, s.Code, s.OccurredAt.UnixMilli()}] = s.Value
			}
			mu.Unlock()
			if page >= p.Pagination.TotalPages {
				return nil
			}
		}
	})
	return out, err
}

// eachMount calls f for every uid, 8 at a time; the first error ends it.
func (d *deployment) eachMount(uids []string, f func(uid string) error) error {
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	sem := make(chan struct{}, 8)
	for _, uid := range uids {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := f(uid); err != nil {
				once.Do(func() { firstErr = err })
			}
		})
	}
	wg.Wait()
	return firstErr
}

// alarmMismatch lists the own mounts whose ACTIVE alarms of the rule do
// not match their latest battery (below 20: exactly one; else none).
func (d *deployment) alarmMismatch(ctx context.Context, ruleID string) ([]string, error) {
	active := map[string]int{}
	for page := 1; ; page++ {
		var p struct {
			Alarms []struct {
				UID string `json:"uid"`
			} `json:"alarms"`
			Pagination struct {
				TotalPages int `json:"totalPages"`
			} `json:"pagination"`
		}
		q := url.Values{"state": {"ACTIVE"}, "ruleId": {ruleID}, "pageSize": {"100"}, "currentPage": {strconv.Itoa(page)}}
		if err := withRetries(ctx, func() error { return d.api.Do(ctx, http.MethodGet, "/alarms?"+q.Encode(), nil, &p) }); err != nil {
			return nil, fmt.Errorf("alarms: %w", err)
		}
		for _, a := range p.Alarms {
			active[a.UID]++
		}
		if page >= p.Pagination.TotalPages {
			break
		}
	}
	var mu sync.Mutex
	var out []string
	err := d.eachMount(d.uidsOwn, func(uid string) error {
		var m []struct {
			BatteryLevel *float64 `json:"batteryLevel"`
		}
		if err := withRetries(ctx, func() error { return d.api.Do(ctx, http.MethodGet, "/mounts/"+uid, nil, &m) }); err != nil {
			return fmt.Errorf("%s: %w", uid, err)
		}
		low := len(m) == 1 && m[0].BatteryLevel != nil && *m[0].BatteryLevel < 20
		want := 0
		if low {
			want = 1
		}
		if active[uid] != want {
			mu.Lock()
			out = append(out, fmt.Sprintf("%s: battery low %v, %d ACTIVE", uid, low, active[uid]))
			mu.Unlock()
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

// stuckCommands lists the commands of every mount still ISSUED more than
// 30 s past their expiresAt (the sweep runs every 5 s).
func (d *deployment) stuckCommands(ctx context.Context) ([]string, int, error) {
	var mu sync.Mutex
	var out []string
	checked := 0
	now := time.Now()
	uids := append(append(append([]string(nil), d.uidsOwn...), d.uidsA...), d.uidsB...)
	err := d.eachMount(uids, func(uid string) error {
		for page := 1; ; page++ {
			var p struct {
				Commands []struct {
					ID     string `json:"id"`
					Code   string `json:"code"`
					Status string `json:"status"`
					Data   struct {
						ExpiresAt time.Time `json:"expiresAt"`
					} `json:"data"`
				} `json:"commands"`
				Pagination struct {
					TotalPages int `json:"totalPages"`
				} `json:"pagination"`
			}
			q := url.Values{"pageSize": {"100"}, "currentPage": {strconv.Itoa(page)}}
			if err := withRetries(ctx, func() error { return d.api.Do(ctx, http.MethodGet, "/mounts/"+uid+"/commands?"+q.Encode(), nil, &p) }); err != nil {
				return fmt.Errorf("%s commands: %w", uid, err)
			}
			mu.Lock()
			for _, c := range p.Commands {
				checked++
				if c.Status == "ISSUED" && !c.Data.ExpiresAt.IsZero() && now.Sub(c.Data.ExpiresAt) > 30*time.Second {
					out = append(out, fmt.Sprintf("%s %s %s expired %s", uid, c.Code, c.ID, c.Data.ExpiresAt.Format(time.RFC3339)))
				}
			}
			mu.Unlock()
			if page >= p.Pagination.TotalPages {
				return nil
			}
		}
	})
	sort.Strings(out)
	return out, checked, err
}

// nginxStatuses counts the access log's answers by status (the last field).
func nginxStatuses(path string) (map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		out[line[strings.LastIndexByte(line, '|')+1:]]++
	}
	return out, sc.Err()
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// countLines counts the lines of path holding s.
func countLines(path, s string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			n++
		}
	}
	return n
}

func (r *report) print(out io.Writer) {
	fmt.Fprintf(out, "soak: %d replicas behind nginx, %d mountsim mounts + %d own, %d subscribers (%d on every mount), load %.0f s, read replica %v\n",
		r.Replicas, r.Mounts, r.OwnMounts, r.Subscribers, r.FullSubscribers, r.LoadSeconds, r.ReadReplica)
	fmt.Fprintf(out, "faults: %d replica kills, %d exits on their own\n", r.Kills, r.Crashes)
	for _, f := range r.Faults {
		errText := ""
		if f.Error != "" {
			errText = " ERROR " + f.Error
		}
		fmt.Fprintf(out, "  %6.0f s  %-70s %6.1f s%s\n", f.AtSeconds, f.What, f.Seconds, errText)
	}
	fmt.Fprintf(out, "job created at %.0f s, completed at %.0f s; rollout created at %.0f s, completed at %.0f s\n",
		r.JobCreatedAt, r.JobEndedAt, r.RolloutCreatedAt, r.RolloutEndedAt)
	fmt.Fprintf(out, "feed: %d events; own reports acknowledged %d, given up %d (retries %d); reconnects %v; webhook duplicates %v\n",
		r.FeedEvents, r.Own.Acknowledged, r.Own.GivenUp, r.Own.Retries, r.Reconnects, r.WebhookDups)
	if len(r.ReconnectReasons) > 0 {
		fmt.Fprintf(out, "reconnections by reason:\n")
		for reason, n := range r.ReconnectReasons {
			fmt.Fprintf(out, "  %6d  %s\n", n, reason)
		}
	}
	fmt.Fprintf(out, "own requests by status %v; nginx answers by status %v\n", r.Statuses, r.NginxStatuses)
	fmt.Fprintf(out, "\n%-62s %8s %10s  %s\n", "check", "count", "of", "result")
	for _, c := range r.Checks {
		result := "info"
		if c.Zero {
			result = "ok"
			if c.Count != 0 {
				result = "FAIL"
			}
		}
		of := ""
		if c.Of > 0 {
			of = strconv.Itoa(c.Of)
		}
		note := ""
		if c.Note != "" {
			note = "  (" + c.Note + ")"
		}
		fmt.Fprintf(out, "%-62s %8d %10s  %s%s\n", c.Name, c.Count, of, result, note)
	}
	for name, ex := range r.Examples {
		fmt.Fprintf(out, "\n%s, e.g.:\n", name)
		for _, e := range ex {
			fmt.Fprintf(out, "  %s\n", e)
		}
	}
	for _, name := range []string{"A", "B"} {
		fmt.Fprintf(out, "\nmountsim %s: %s", name, r.Mountsim[name])
	}
	fmt.Fprintf(out, "\nlogs: %s\n", r.LogDir)
}
