package metrics

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// cachedCount is a count read from the database when scraped, reused for
// 15 s: every replica answers for the whole fleet, so frequent scrapes of
// many replicas cost one read each per window. A failed read keeps the
// last value (logged); before any, get reports none.
type cachedCount[T any] struct {
	read   func(context.Context) (T, error)
	what   string // for the log line
	logger *slog.Logger

	mu   sync.Mutex
	ok   bool
	last T
	at   time.Time
}

func (c *cachedCount[T]) get() (T, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ok || time.Since(c.at) > 15*time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		v, err := c.read(ctx)
		cancel()
		if err != nil {
			c.logger.Warn("count "+c.what+" for metrics failed", "err", err)
		} else {
			c.last, c.ok, c.at = v, true, time.Now()
		}
	}
	return c.last, c.ok
}

// CachedGauge is a gauge counted in the database when scraped, at most
// once per 15 s (cachedCount); before the first count, it is absent.
func CachedGauge(name, help string, count func(context.Context) (int, error), logger *slog.Logger) prometheus.Collector {
	return &cachedGauge{count: cachedCount[int]{read: count, what: name, logger: logger}, desc: prometheus.NewDesc(name, help, nil, nil)}
}

type cachedGauge struct {
	count cachedCount[int]
	desc  *prometheus.Desc
}

func (c *cachedGauge) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *cachedGauge) Collect(ch chan<- prometheus.Metric) {
	if n, ok := c.count.get(); ok {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n))
	}
}
