package metrics

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(res.Body)
	require.NoError(t, err)
	return fams
}

// value returns the value of the family's sample whose labels include
// want (counter, gauge, or a histogram's count).
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	f, ok := fams[name]
	require.True(t, ok, "no metric %s", name)
next:
	for _, m := range f.GetMetric() {
		for k, v := range want {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	t.Fatalf("no sample of %s with %v", name, want)
	return 0
}

func status(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// /metrics counts this process's jobs by queue and class (successes,
// failures, over-limit reschedules, durations) and shows the cluster's
// queues and sets; /healthz and /readyz follow the process and Redis.
func TestMetricsAndHealthEndpoints(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	srv, err := sidekiq.NewServer(&sidekiq.ServerConfig{Pool: pool, Concurrency: 3, DisablePoller: true,
		Fetch: "reliable", Logger: zerolog.Nop(), Queues: []wire.QueueWeight{{Name: "default"}, {Name: "mail"}}})
	require.NoError(t, err)
	srv.Handle("Ok", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error { return nil }), nil)
	srv.Handle("Bad", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error { return errors.New("boom") }), nil)
	srv.Handle("Limited", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		return &sidekiq.OverLimitError{Limiter: "api", RetryAfter: time.Hour}
	}), nil)
	admin, err := api.New(&api.Config{Pool: pool})
	require.NoError(t, err)
	e := New(srv, pool)
	// A second exporter, as on another worker without --cluster-metrics.
	plain := httptest.NewServer(New(srv2(t, pool), pool).Handler())
	defer plain.Close()
	e.Register(NewCluster(admin))
	web := httptest.NewServer(e.Handler())
	defer web.Close()
	code, _ := status(t, web.URL+"/healthz")
	require.Equal(t, http.StatusServiceUnavailable, code, "not started yet")

	// A job left in the in-progress list of a process that is gone: this
	// one recovers it at start, runs it, and counts the recovery.
	orphan, _ := wire.NewJob("Ok")
	orphan.SetQueue("default")
	orphan.Set("jid", rubyjson.StringValue("0123456789abcdef01234567"))
	conn := pool.Get()
	list := contract.WorkingListKey("default", "gone-host:4242:aaaaaaaaaaaa")
	_, err = conn.Do("LPUSH", list, orphan.Bytes())
	require.NoError(t, err)
	_, err = conn.Do("SADD", contract.KeyWorkingLists, list)
	require.NoError(t, err)
	conn.Close()

	require.NoError(t, srv.Start(context.Background()))
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Stop(ctx)
	}()
	ctx := context.Background()
	c := srv.Client()
	for range 3 {
		_, err := c.Enqueue(ctx, "default", "Ok")
		require.NoError(t, err)
	}
	bad, _ := wire.NewJob("Bad")
	bad.Set("retry", rubyjson.BoolValue(false))
	_, err = c.Push(ctx, bad, nil)
	require.NoError(t, err)
	_, err = c.Enqueue(ctx, "mail", "Limited")
	require.NoError(t, err)
	_, err = c.Enqueue(ctx, "idle", "Ok") // no process fetches "idle"
	require.NoError(t, err)

	var fams map[string]*dto.MetricFamily
	wait.For(t, "six jobs counted", func() bool {
		fams = scrape(t, web.URL)
		f := fams["gojob_jobs_processed_total"]
		total := 0.0
		for _, m := range f.GetMetric() {
			total += m.GetCounter().GetValue()
		}
		return total == 6
	})
	require.Equal(t, 4.0, value(t, fams, "gojob_jobs_processed_total", map[string]string{"queue": "default", "class": "Ok"}))
	require.Equal(t, 1.0, value(t, fams, "gojob_recovered_jobs_total", nil))
	require.Equal(t, 0.0, value(t, fams, "gojob_poison_pills_total", nil))
	require.Equal(t, 0.0, value(t, fams, "gojob_redis_outages_total", nil))
	require.Contains(t, fams, "gojob_redis_errors_total")
	require.Equal(t, 1.0, value(t, fams, "gojob_jobs_failed_total", map[string]string{"class": "Bad"}))
	require.Equal(t, 1.0, value(t, fams, "gojob_jobs_over_limit_total", map[string]string{"queue": "mail", "class": "Limited"}))
	require.Equal(t, 4.0, value(t, fams, "gojob_job_duration_seconds", map[string]string{"class": "Ok"}))
	require.Equal(t, 3.0, value(t, fams, "gojob_slots", nil))
	require.Equal(t, 0.0, value(t, fams, "gojob_busy_slots", nil))
	require.Equal(t, 1.0, value(t, fams, "gojob_redis_up", nil))
	require.Equal(t, 0.0, value(t, fams, "gojob_quiet", nil))
	require.Equal(t, 1.0, value(t, fams, "gojob_queue_size", map[string]string{"queue": "idle"}))
	require.Greater(t, value(t, fams, "gojob_queue_latency_seconds", map[string]string{"queue": "idle"}), 0.0)
	require.Equal(t, 1.0, value(t, fams, "gojob_set_size", map[string]string{"set": "schedule"}), "the over-limit job")
	require.Equal(t, 0.0, value(t, fams, "gojob_cluster_scrape_error", nil))
	require.Contains(t, fams, "go_goroutines")
	bi := fams["gojob_build_info"]
	require.NotNil(t, bi)
	require.Equal(t, 1.0, bi.Metric[0].GetGauge().GetValue())
	labels := map[string]string{}
	for _, l := range bi.Metric[0].Label {
		labels[l.GetName()] = l.GetValue()
	}
	require.Equal(t, runtime.Version(), labels["goversion"])
	require.NotEmpty(t, labels["version"])

	// The other worker exports its own series and its build, not the
	// cluster's (they would repeat per worker).
	other := scrape(t, plain.URL)
	require.Contains(t, other, "gojob_build_info")
	require.Contains(t, other, "gojob_slots")
	for _, name := range []string{"gojob_queue_size", "gojob_queue_latency_seconds", "gojob_set_size", "gojob_cluster_processed_total", "gojob_cluster_scrape_error"} {
		require.NotContains(t, other, name)
	}

	code, _ = status(t, web.URL+"/healthz")
	require.Equal(t, http.StatusOK, code)
	code, _ = status(t, web.URL+"/readyz")
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, rs.Pause())
	code, body := status(t, web.URL+"/readyz")
	require.NoError(t, rs.Resume())
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.True(t, strings.HasPrefix(body, "redis unreachable"), body)
	code, _ = status(t, web.URL+"/healthz")
	require.Equal(t, http.StatusOK, code, "a Redis outage does not make the process unhealthy")
	srv.Signal("TSTP")
	code, body = status(t, web.URL+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "quiet")
}

// srv2 is a server that is never started (its exporter still serves).
func srv2(t *testing.T, pool *redis.Pool) *sidekiq.Server {
	t.Helper()
	s, err := sidekiq.NewServer(&sidekiq.ServerConfig{Pool: pool, Concurrency: 1, DisablePoller: true, Logger: zerolog.Nop()})
	require.NoError(t, err)
	return s
}
