package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/cron"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/web"
)

// defaultWebAddr is where `gojob web` listens unless told otherwise: the
// port Ruby's rackup serves the Sidekiq Web UI on, on loopback only.
const defaultWebAddr = "127.0.0.1:9292"

// serveWeb serves the dashboard on ln until the returned stop is called.
func serveWeb(ln net.Listener, cfg *web.Config, log zerolog.Logger) (func(), error) {
	h, err := web.New(cfg)
	if err != nil {
		ln.Close()
		return nil, err
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Str("component", "web").Msg("dashboard stopped")
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		hs.Shutdown(ctx)
	}, nil
}

// startDevWeb serves the dashboard for `gojob dev` on 127.0.0.1:9292, or a
// free port when that is taken, and prints its URL. It returns the stop
// function.
func startDevWeb(c *ucli.Context, srv *sidekiq.Server, pool *redis.Pool, log zerolog.Logger) (func(), error) {
	addr := c.String("web-addr")
	if addr == "off" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil && !c.IsSet("web-addr") {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		return nil, ucli.Exit(fmt.Sprintf("--web-addr %s: %v", addr, err), 2)
	}
	admin, err := api.New(&api.Config{Pool: pool, Client: srv.Client()})
	if err != nil {
		ln.Close()
		return nil, err
	}
	cfg := &web.Config{Pool: pool, API: admin, Logger: log,
		Cron: &cron.Store{Client: srv.Client(), Layout: cron.Layout{}}}
	stop, err := serveWeb(ln, cfg, log)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(c.App.Writer, "dashboard: http://%s/  (jobs, retries, processes; stop with Ctrl-C)\n", ln.Addr())
	return stop, nil
}

// devWebFlags are `gojob dev`'s dashboard flags.
func devWebFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "web-addr", Value: defaultWebAddr, Usage: "serve the dashboard on `HOST:PORT` (a free port when the default is taken; off: no dashboard)"},
	}
}
