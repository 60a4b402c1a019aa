// Package metrics exposes the fleet's Prometheus metrics: what this
// replica committed (events, state entries, commands, webhook attempts),
// the mounts by association state and the event feed's lag.
package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mountd/mountd/core"
)

// Fleet is a core.EventWaker that also counts (core.FleetMeter).
type Fleet struct {
	core.EventWaker
	events     *prometheus.CounterVec
	entries    prometheus.Counter
	commands   *prometheus.CounterVec
	outcomes   *prometheus.CounterVec
	deliveries *prometheus.CounterVec
	grants     prometheus.Counter
	offline    *prometheus.CounterVec
}

var (
	_ core.FleetMeter          = (*Fleet)(nil)
	_ core.CommandOutcomeMeter = (*Fleet)(nil)
	_ core.GrantMeter          = (*Fleet)(nil)
)

// NewFleet counts on behalf of waker's users.
func NewFleet(waker core.EventWaker) *Fleet {
	f := &Fleet{
		EventWaker: waker,
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mountd_events_total",
			Help: "Events committed to the event log by this replica, by type."}, []string{"type"}),
		entries: prometheus.NewCounter(prometheus.CounterOpts{Name: "mountd_state_entries_total",
			Help: "State entries stored by this replica (duplicates not counted)."}),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mountd_commands_total",
			Help: "Signed commands issued by this replica, by code."}, []string{"code"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mountd_command_outcomes_total",
			Help: "Command status changes made by this replica (EXECUTED, REFUSED from a receipt; UNCONFIRMED at expiry), by code and status."},
			[]string{"code", "status"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mountd_webhook_deliveries_total",
			Help: "Webhook attempts made by this replica, by outcome (succeeded, failed)."}, []string{"outcome"}),
		grants: prometheus.NewCounter(prometheus.CounterOpts{Name: "mountd_grants_issued_total",
			Help: "Rider grants issued by this replica (offline access)."}),
		offline: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mountd_offline_uses_total",
			Help: "Offline uses stored by this replica from mounts' receipts, by outcome (EXECUTED, REFUSED)."}, []string{"outcome"}),
	}
	// Every known label at zero from the start: dashboards and alerts
	// (rate(), absent()) see a series before its first event.
	for _, t := range core.EventTypes {
		f.events.WithLabelValues(string(t))
	}
	for _, c := range core.CommandCodes {
		f.commands.WithLabelValues(string(c))
		for _, st := range []core.CommandStatus{core.CommandExecuted, core.CommandRefused, core.CommandUnconfirmed} {
			f.outcomes.WithLabelValues(string(c), string(st))
		}
	}
	for _, o := range []core.CommandStatus{core.CommandExecuted, core.CommandRefused} {
		f.offline.WithLabelValues(string(o))
	}
	for _, o := range []string{"succeeded", "failed"} {
		f.deliveries.WithLabelValues(o)
	}
	return f
}

// EventCommitted implements core.FleetMeter.
func (f *Fleet) EventCommitted(e *core.Event) {
	f.events.WithLabelValues(string(e.Type)).Inc()
	f.entries.Add(float64(len(e.States)))
}

// CommandIssued implements core.FleetMeter.
func (f *Fleet) CommandIssued(code core.CommandCode) { f.commands.WithLabelValues(string(code)).Inc() }

// CommandOutcome implements core.CommandOutcomeMeter.
func (f *Fleet) CommandOutcome(code core.CommandCode, status core.CommandStatus) {
	f.outcomes.WithLabelValues(string(code), string(status)).Inc()
}

// GrantIssued implements core.GrantMeter.
func (f *Fleet) GrantIssued() { f.grants.Inc() }

// OfflineUse implements core.GrantMeter.
func (f *Fleet) OfflineUse(outcome core.CommandStatus) {
	f.offline.WithLabelValues(string(outcome)).Inc()
}

// DeliveryFinished implements core.FleetMeter.
func (f *Fleet) DeliveryFinished(status core.DeliveryStatus) {
	outcome := "failed"
	if status == core.DeliverySucceeded {
		outcome = "succeeded"
	}
	f.deliveries.WithLabelValues(outcome).Inc()
}

// Collectors returns the counters and, read when scraped, the mounts by
// association state (from counts, at most once per 15 s) and the feed's
// lag.
func (f *Fleet) Collectors(counts func(context.Context) (map[string]int, error), lag func() time.Duration, logger *slog.Logger) []prometheus.Collector {
	return []prometheus.Collector{f.events, f.entries, f.commands, f.outcomes, f.deliveries, f.grants, f.offline,
		&mountsCollector{counts: cachedCount[map[string]int]{read: counts, what: "mounts", logger: logger}, desc: prometheus.NewDesc("mountd_mounts",
			"Mounts by association state (INACTIVE, IDLE, ASSOCIATED).", []string{"association_state"}, nil)},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mountd_event_log_lag_seconds",
			Help: "How long after it occurred the newest event reached this replica's subscribers."},
			func() float64 { return lag().Seconds() }),
	}
}

// mountsCollector counts mounts in the database when scraped (at most
// every 15 s, cachedCount).
type mountsCollector struct {
	counts cachedCount[map[string]int]
	desc   *prometheus.Desc
}

func (c *mountsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *mountsCollector) Collect(ch chan<- prometheus.Metric) {
	counts, ok := c.counts.get()
	if !ok {
		return
	}
	for _, state := range []string{"INACTIVE", "IDLE", "ASSOCIATED"} {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[state]), state)
	}
}

// AlarmCollectors are the gauges of presence and alarms, read from the
// database (every replica answers for the whole fleet), at most every 15 s:
// mountd_mounts_offline and mountd_alarms_active{severity}.
func AlarmCollectors(counts func(context.Context) (int, map[core.Severity]int, error), logger *slog.Logger) []prometheus.Collector {
	read := func(ctx context.Context) (alarmCounts, error) {
		off, active, err := counts(ctx)
		return alarmCounts{offline: off, active: active}, err
	}
	return []prometheus.Collector{&alarmsCollector{counts: cachedCount[alarmCounts]{read: read, what: "alarms", logger: logger},
		offline: prometheus.NewDesc("mountd_mounts_offline",
			"Mounts of live associations whose lastSeenAt is older than MOUNTD_OFFLINE_AFTER.", nil, nil),
		active: prometheus.NewDesc("mountd_alarms_active", "ACTIVE alarms by severity.", []string{"severity"}, nil)}}
}

// alarmCounts are mountd_mounts_offline's and mountd_alarms_active's
// values, read together.
type alarmCounts struct {
	offline int
	active  map[core.Severity]int
}

type alarmsCollector struct {
	counts          cachedCount[alarmCounts]
	offline, active *prometheus.Desc
}

func (c *alarmsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.offline; ch <- c.active }

func (c *alarmsCollector) Collect(ch chan<- prometheus.Metric) {
	counts, ok := c.counts.get()
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.offline, prometheus.GaugeValue, float64(counts.offline))
	for _, sev := range []core.Severity{core.SeverityInfo, core.SeverityWarning, core.SeverityCritical} {
		ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, float64(counts.active[sev]), string(sev))
	}
}
