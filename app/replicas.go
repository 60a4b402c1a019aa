package app

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mountd/mountd/adapters/bunstore"
)

var (
	replicaLagDesc = prometheus.NewDesc("mountd_db_replica_lag_seconds",
		"Each read replica's replay lag behind the primary by WAL position, as of its last probe; -1 when unknown (unreachable or promoted).",
		[]string{"replica"}, nil)
	dbReadsDesc = prometheus.NewDesc("mountd_db_reads_total",
		"Reads that may go to a read replica (lists, filters, counts, exports, GraphQL queries), by where they went.",
		[]string{"target"}, nil)
)

// replicaCollector shows where the replica-eligible reads went and how far
// each replica is behind.
type replicaCollector struct{ store *bunstore.Store }

func (c replicaCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- replicaLagDesc
	ch <- dbReadsDesc
}

func (c replicaCollector) Collect(ch chan<- prometheus.Metric) {
	st, _ := c.store.ReplicaStats()
	ch <- prometheus.MustNewConstMetric(dbReadsDesc, prometheus.CounterValue, float64(st.PrimaryReads), "primary")
	ch <- prometheus.MustNewConstMetric(dbReadsDesc, prometheus.CounterValue, float64(st.ReplicaReads), "replica")
	for name, lag := range st.Lag {
		seconds := lag.Seconds()
		if lag < 0 {
			seconds = -1
		}
		ch <- prometheus.MustNewConstMetric(replicaLagDesc, prometheus.GaugeValue, seconds, name)
	}
}
