package metrics

import (
	"context"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gojob/gojob/internal/buildinfo"
	"github.com/gojob/gojob/sidekiq/api"
)

var (
	descQueueSize   = prometheus.NewDesc("gojob_queue_size", "Jobs waiting in the queue (cluster-wide).", []string{"queue"}, nil)
	descQueueLat    = prometheus.NewDesc("gojob_queue_latency_seconds", "Age of the queue's oldest job (cluster-wide).", []string{"queue"}, nil)
	descSetSize     = prometheus.NewDesc("gojob_set_size", "Entries of the retry, schedule and dead sets (cluster-wide).", []string{"set"}, nil)
	descClusterProc = prometheus.NewDesc("gojob_cluster_processed_total", "Sidekiq's stat:processed, all processes, Ruby included.", nil, nil)
	descClusterFail = prometheus.NewDesc("gojob_cluster_failed_total", "Sidekiq's stat:failed, all processes, Ruby included.", nil, nil)
	descScrapeErr   = prometheus.NewDesc("gojob_cluster_scrape_error", "1 when the cluster-wide figures could not be read for this scrape.", nil, nil)
)

// cluster collects the cluster-wide figures every process shares (queues,
// sets, Sidekiq's counters), read through the admin API at scrape time.
type cluster struct {
	admin *api.API
}

// NewCluster returns the collector of the cluster-wide figures every
// process shares (queues, sets, Sidekiq's counters), read through admin at
// scrape time. `gojob web` serves one in a registry of its own; a worker's
// Exporter adds one only through Register.
func NewCluster(admin *api.API) prometheus.Collector { return &cluster{admin: admin} }

// Describe implements prometheus.Collector.
func (c *cluster) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descQueueSize, descQueueLat, descSetSize, descClusterProc, descClusterFail, descScrapeErr} {
		ch <- d
	}
}

// Collect implements prometheus.Collector (at most 2 s of Redis reads per
// scrape; gojob_cluster_scrape_error says when they failed).
func (c *cluster) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	failed := c.collect(ctx, ch) != nil
	ch <- prometheus.MustNewConstMetric(descScrapeErr, prometheus.GaugeValue, b2f(failed))
}

func (c *cluster) collect(ctx context.Context, ch chan<- prometheus.Metric) error {
	st, err := c.admin.Stats(ctx)
	if err != nil {
		return err
	}
	ch <- prometheus.MustNewConstMetric(descClusterProc, prometheus.CounterValue, float64(st.Processed))
	ch <- prometheus.MustNewConstMetric(descClusterFail, prometheus.CounterValue, float64(st.Failed))
	ch <- prometheus.MustNewConstMetric(descSetSize, prometheus.GaugeValue, float64(st.Retries), "retry")
	ch <- prometheus.MustNewConstMetric(descSetSize, prometheus.GaugeValue, float64(st.Scheduled), "schedule")
	ch <- prometheus.MustNewConstMetric(descSetSize, prometheus.GaugeValue, float64(st.Dead), "dead")
	for _, q := range st.Queues {
		ch <- prometheus.MustNewConstMetric(descQueueSize, prometheus.GaugeValue, float64(q.Size), q.Name)
		lat, err := c.admin.Queue(q.Name).Latency(ctx)
		if err != nil {
			return err
		}
		ch <- prometheus.MustNewConstMetric(descQueueLat, prometheus.GaugeValue, lat.Seconds(), q.Name)
	}
	return nil
}

// BuildInfo returns the collector of gojob_build_info{version, goversion,
// revision} 1, the usual build-info gauge: join on it to label the other
// series with the version that produced them.
func BuildInfo() prometheus.Collector {
	revision := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				revision = s.Value
			}
		}
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "gojob_build_info",
		Help:        "Always 1; its labels say which gojob build runs.",
		ConstLabels: prometheus.Labels{"version": buildinfo.Version(), "goversion": runtime.Version(), "revision": revision}})
	g.Set(1)
	return g
}
