// Package expiry drops expired jobs unrun, as Sidekiq Pro's expiring jobs
// do (sidekiq/pro/expiry; docs: Pro Expiring Jobs): a job whose payload
// "expires_at" (epoch seconds) has passed when a process is about to run
// it is acknowledged without running, counted, and logged once per class.
// An expired job counts as a success, so its batch, if any, succeeds, as
// with Pro.
//
// Jobs get "expires_at" from a Sidekiq Pro client (sidekiq_options
// expires_in: or set(expires_in:)) or from gojob's sidekiq.PushOpts
// ExpiresIn. The extension is scoped to the "expires_at" key: jobs
// without it never reach its hook.
package expiry

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/monoclock"
	"github.com/gojob/gojob/sidekiq"
)

// payloadKey is the payload key of a job's expiry time.
const payloadKey = "expires_at"

// msThreshold tells epoch milliseconds from seconds: 1e11 seconds is in
// the year 5138, 1e11 milliseconds in 1973.
const msThreshold = 1e11

// Config configures the extension.
type Config struct {
	// Logger logs the first expired job of each class.
	Logger zerolog.Logger
	// Clock is the time source. Default the system clock.
	Clock clock.Clock
	// OnExpired, when set, is called with each expired job after it is
	// counted (a metric, an audit row). It must not block for long: the
	// job's slot waits for it.
	OnExpired func(ctx context.Context, run *sidekiq.Run)
}

// Extension is the sidekiq.Extension (a RunHook scoped to "expires_at") that drops
// expired jobs. Add it with Server.Extend.
type Extension struct {
	cfg Config

	mu      sync.Mutex
	byClass map[string]int64
}

// New returns the extension.
func New(cfg Config) *Extension {
	cfg.Clock = monoclock.Or(cfg.Clock)
	return &Extension{cfg: cfg, byClass: map[string]int64{}}
}

// PayloadKeys implements sidekiq.ScopedExtension.
func (e *Extension) PayloadKeys() []string { return []string{payloadKey} }

// Run implements sidekiq.RunHook: it runs the job unless its expires_at
// has passed. As Pro's server middleware, a job runs while now <=
// expires_at; a non-numeric expires_at is ignored (the job runs).
func (e *Extension) Run(ctx context.Context, run *sidekiq.Run, next func(context.Context) error) error {
	v, _ := run.Job.Get(payloadKey)
	at, ok := v.Float()
	if ok && at > msThreshold {
		// Epoch milliseconds, Sidekiq 8's timestamp unit
		// (docs/sidekiq-wire.md): read as such rather than as a time
		// thousands of years away.
		at /= 1000
	}
	if !ok || contract.EpochSeconds(e.cfg.Clock.Now()) <= at {
		return next(ctx)
	}
	class := contract.ActiveJobClass(run.Job)
	if class == "" {
		class = run.Job.Class()
	}
	e.mu.Lock()
	e.byClass[class]++
	first := e.byClass[class] == 1
	e.mu.Unlock()
	if first {
		e.cfg.Logger.Info().Str("class", class).Str("jid", run.Job.JID()).
			Str("expired_at", contract.FromEpochSeconds(at).UTC().Format("2006-01-02T15:04:05.000Z")).
			Msg("expired job skipped; later expired jobs of this class are counted, not logged")
	}
	if e.cfg.OnExpired != nil {
		e.cfg.OnExpired(ctx, run)
	}
	return nil
}

// ExpiredByClass returns the number of jobs dropped since New per class
// (the ActiveJob class for wrapped jobs).
func (e *Extension) ExpiredByClass() map[string]int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]int64, len(e.byClass))
	for k, v := range e.byClass {
		out[k] = v
	}
	return out
}

var descExpired = prometheus.NewDesc("gojob_jobs_expired_total",
	"Jobs this process dropped unrun because their expires_at had passed (Sidekiq Pro's expiring jobs).", []string{"class"}, nil)

// Describe implements prometheus.Collector: the extension exports
// gojob_jobs_expired_total{class} (metrics.Exporter.Register).
func (e *Extension) Describe(ch chan<- *prometheus.Desc) { ch <- descExpired }

// Collect implements prometheus.Collector.
func (e *Extension) Collect(ch chan<- prometheus.Metric) {
	for class, n := range e.ExpiredByClass() {
		ch <- prometheus.MustNewConstMetric(descExpired, prometheus.CounterValue, float64(n), class)
	}
}
