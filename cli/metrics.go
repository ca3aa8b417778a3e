package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/metrics"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/api"
)

func metricsWorkFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "metrics-addr", Usage: "serve Prometheus /metrics, /healthz and /readyz on `HOST:PORT` (e.g. 127.0.0.1:9090)"},
		&ucli.BoolFlag{Name: "cluster-metrics", Usage: "also export the cluster-wide queue and set gauges on --metrics-addr (on one worker only; gojob web serves them too)"},
	}
}

// startMetrics serves the exporter of srv on --metrics-addr (nothing when
// unset) until the returned stop is called.
func startMetrics(c *ucli.Context, srv *sidekiq.Server, pool *redis.Pool, log zerolog.Logger, extra ...prometheus.Collector) (func(), error) {
	addr := c.String("metrics-addr")
	if addr == "" {
		if c.Bool("cluster-metrics") {
			return nil, ucli.Exit("--cluster-metrics needs --metrics-addr HOST:PORT to serve them on", exitUsage)
		}
		return func() {}, nil
	}
	if c.Bool("cluster-metrics") {
		admin, err := api.New(&api.Config{Pool: pool, Client: srv.Client()})
		if err != nil {
			return nil, err
		}
		extra = append(extra, metrics.NewCluster(admin))
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, ucli.Exit(fmt.Sprintf("--metrics-addr %s: %v", addr, err), exitUsage)
	}
	exp := metrics.New(srv, pool).Register(extra...)
	hs := &http.Server{Handler: exp.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Str("component", "metrics").Msg("metrics server stopped")
		}
	}()
	log.Info().Str("component", "metrics").Str("addr", ln.Addr().String()).Msg("serving /metrics, /healthz and /readyz")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		hs.Shutdown(ctx)
	}, nil
}
