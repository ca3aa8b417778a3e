// Package metrics serves a gojob process's Prometheus metrics and its
// health endpoints: /metrics (this process's jobs by queue and class, its
// slots and Redis state, its build, and, when NewCluster is registered, the
// cluster's queues and sets read through the admin API at scrape time),
// /healthz (the process runs) and /readyz (Redis answers and the process
// takes jobs). The cluster's figures are the same from every process, so
// one exporter serves them: `gojob web` does, or the one worker started with
// --cluster-metrics; otherwise each series would repeat per worker.
// docs/metrics.md lists the metrics.
package metrics

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gojob/gojob/sidekiq"
)

// Exporter collects a server's metrics. Create it with New before the
// server starts (it observes the server's jobs).
type Exporter struct {
	srv  *sidekiq.Server
	pool *redis.Pool
	reg  *prometheus.Registry

	processed *prometheus.CounterVec
	failed    *prometheus.CounterVec
	overLimit *prometheus.CounterVec
	duration  *prometheus.HistogramVec
}

// New returns the exporter of srv; pool is the Redis it reports on.
func New(srv *sidekiq.Server, pool *redis.Pool) *Exporter {
	e := &Exporter{srv: srv, pool: pool, reg: prometheus.NewRegistry()}
	labels := []string{"queue", "class"}
	e.processed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gojob_jobs_processed_total",
		Help: "Jobs this process finished (successes, failures and over-limit reschedules)."}, labels)
	e.failed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gojob_jobs_failed_total",
		Help: "Jobs this process finished with a failure."}, labels)
	e.overLimit = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gojob_jobs_over_limit_total",
		Help: "Jobs this process rescheduled because a limiter was full (not failures)."}, labels)
	e.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gojob_job_duration_seconds",
		Help:    "Execution time of the jobs this process finished.",
		Buckets: []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}}, labels)
	e.reg.MustRegister(e.processed, e.failed, e.overLimit, e.duration, processCollector{e}, BuildInfo(),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv.Extend(observer{e})
	return e
}

// Register adds collectors to the exporter's /metrics: those of the
// server's extensions (expiry's gojob_jobs_expired_total, say), and
// NewCluster's cluster-wide figures on one exporter of a cluster only (or
// on none when `gojob web` is scraped). Call it before serving. It
// returns e.
func (e *Exporter) Register(cs ...prometheus.Collector) *Exporter {
	e.reg.MustRegister(cs...)
	return e
}

// observer counts the server's finished jobs into its Exporter.
type observer struct{ e *Exporter }

// JobDone implements sidekiq.JobObserver (an extension).
func (o observer) JobDone(queue, class string, took time.Duration, err error) {
	e := o.e
	if class == "" {
		class = "(unparsable)"
	}
	var ol *sidekiq.OverLimitError
	switch {
	case err == nil:
	case errors.As(err, &ol):
		e.overLimit.WithLabelValues(queue, class).Inc()
	default:
		e.failed.WithLabelValues(queue, class).Inc()
	}
	e.duration.WithLabelValues(queue, class).Observe(took.Seconds())
	// Last: a scrape that sees a job processed sees its outcome too.
	e.processed.WithLabelValues(queue, class).Inc()
}

var (
	descBusy        = prometheus.NewDesc("gojob_busy_slots", "Jobs this process runs now.", nil, nil)
	descSlots       = prometheus.NewDesc("gojob_slots", "This process's concurrency.", nil, nil)
	descQuiet       = prometheus.NewDesc("gojob_quiet", "1 when this process takes no new jobs (quiet or stopping).", nil, nil)
	descRedisUp     = prometheus.NewDesc("gojob_redis_up", "0 while this process is in a Redis outage or its fetch fails (then /readyz is 503 too).", nil, nil)
	descRecovered   = prometheus.NewDesc("gojob_recovered_jobs_total", "Jobs this process pushed back to their queue from the in-progress lists of processes that are gone (reliable fetch).", nil, nil)
	descPoison      = prometheus.NewDesc("gojob_poison_pills_total", "Recovered jobs this process moved to the dead set instead: their process died while running them too often.", nil, nil)
	descRedisErrors = prometheus.NewDesc("gojob_redis_errors_total", "Redis commands of this process that failed (connection errors and stalls).", nil, nil)
	descOutages     = prometheus.NewDesc("gojob_redis_outages_total", "Redis outages this process went through.", nil, nil)
)

// processCollector collects the process gauges of an Exporter's server.
type processCollector struct{ e *Exporter }

// Describe implements prometheus.Collector.
func (processCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBusy, descSlots, descQuiet, descRedisUp, descRecovered, descPoison, descRedisErrors, descOutages} {
		ch <- d
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Collect implements prometheus.Collector: the process gauges (the
// cluster's figures come from the registered NewCluster collector).
func (p processCollector) Collect(ch chan<- prometheus.Metric) {
	e := p.e
	fs := e.srv.Status()
	ch <- prometheus.MustNewConstMetric(descBusy, prometheus.GaugeValue, float64(fs.Busy))
	ch <- prometheus.MustNewConstMetric(descSlots, prometheus.GaugeValue, float64(fs.Concurrency))
	ch <- prometheus.MustNewConstMetric(descQuiet, prometheus.GaugeValue, b2f(fs.Quiet))
	ch <- prometheus.MustNewConstMetric(descRedisUp, prometheus.GaugeValue, b2f(!fs.RedisDown))
	ch <- prometheus.MustNewConstMetric(descRecovered, prometheus.CounterValue, float64(fs.Recovered))
	ch <- prometheus.MustNewConstMetric(descPoison, prometheus.CounterValue, float64(fs.PoisonPills))
	ch <- prometheus.MustNewConstMetric(descRedisErrors, prometheus.CounterValue, float64(fs.RedisErrors))
	ch <- prometheus.MustNewConstMetric(descOutages, prometheus.CounterValue, float64(fs.RedisOutages))
}

// Handler serves /metrics, /healthz and /readyz.
func (e *Exporter) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if !e.srv.Status().Running {
			http.Error(w, "not running", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := e.ready(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	return mux
}

// ready: the server takes and finishes jobs (Server.Ready: running, not
// quiet, its fetch succeeds, no job waits while slots stay free), and
// Redis answers a PING within a second.
func (e *Exporter) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := e.srv.Ready(ctx); err != nil {
		return err
	}
	conn, err := e.pool.GetContext(ctx)
	if err != nil {
		return errors.New("redis unreachable: " + err.Error())
	}
	defer conn.Close()
	if _, err := redis.DoContext(conn, ctx, "PING"); err != nil {
		return errors.New("redis unreachable: " + err.Error())
	}
	return nil
}
