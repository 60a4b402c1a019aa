package metrics

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// CachedGauge is a gauge counted in the database when scraped, at most
// once per 15 s (every replica answers for the whole fleet, so frequent
// scrapes of many replicas cost one count each per window). A failed count
// keeps the last value; before any, the gauge is absent.
func CachedGauge(name, help string, count func(context.Context) (int, error), logger *slog.Logger) prometheus.Collector {
	return &cachedGauge{count: count, logger: logger, desc: prometheus.NewDesc(name, help, nil, nil)}
}

type cachedGauge struct {
	count  func(context.Context) (int, error)
	logger *slog.Logger
	desc   *prometheus.Desc

	mu   sync.Mutex
	ok   bool
	last int
	at   time.Time
}

func (c *cachedGauge) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *cachedGauge) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ok || time.Since(c.at) > 15*time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		n, err := c.count(ctx)
		cancel()
		if err != nil {
			c.logger.Warn("count for metrics failed", "metric", c.desc.String(), "err", err)
		} else {
			c.last, c.ok, c.at = n, true, time.Now()
		}
	}
	if c.ok {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(c.last))
	}
}
