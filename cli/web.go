package cli

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/cron"
	"github.com/gojob/gojob/durable"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/web"
)

func webCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "web",
		Usage: "serve the dashboard: jobs, queues, retries, processes, metrics, SideJob trees (Ruby and Go alike)",
		Description: `Serves gojob's dashboard over the Sidekiq data in Redis: counters and
history chart, busy processes (quiet / stop), queues, retries, scheduled and
dead jobs (retry, kill, delete, one by one or in bulk), per-class metrics,
SideJob job trees, sidekiq-cron jobs and, with --durable, the durable rows.
It also serves the cluster-wide Prometheus gauges at /metrics.

It listens on 127.0.0.1 unless --addr says otherwise; a non-loopback address
needs --auth or --token. Requests must name a loopback host, the --addr host
or an --allow-host name (a DNS-rebinding page names its own); --base-path
mounts it under a proxy's path prefix. Set-wide actions run in the
background with their progress on the page. See docs/web.md.`,
		Flags: append([]ucli.Flag{
			newRedisFlag(),
			newVersionFlag(),
			&ucli.StringFlag{Name: "addr", Value: defaultWebAddr, Usage: "listen on `HOST:PORT`"},
			&ucli.StringFlag{Name: "auth", Usage: "require HTTP basic authentication as `USER:PASSWORD`", EnvVars: []string{"GOJOB_WEB_AUTH"}},
			&ucli.StringFlag{Name: "token", Usage: "require this `TOKEN` (Authorization: Bearer, or open the printed URL once)", EnvVars: []string{"GOJOB_WEB_TOKEN"}},
			&ucli.BoolFlag{Name: "read-only", Usage: "show everything, change nothing (no buttons; POSTs refused)"},
			&ucli.StringSliceFlag{Name: "allow-host", Usage: "also accept requests for host `NAME` (Host and Origin headers; loopback names and the --addr host are always accepted; * accepts any); repeat"},
			&ucli.StringFlag{Name: "base-path", Usage: "serve under the path `PREFIX` (e.g. /sidekiq) when a proxy mounts the dashboard there"},
			&ucli.StringSliceFlag{Name: "durable", Usage: "durable database `URL` (postgres://… or sqlite:PATH) whose rows to show; repeat"},
			&ucli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn, error"},
		}, cronLayoutFlags()...),
		Action: func(c *ucli.Context) error {
			log := newLogger(c.App.ErrWriter, false, c.String("log-level"))
			addr := c.String("addr")
			if err := checkWebAddr(addr, c.String("auth") != "" || c.String("token") != ""); err != nil {
				return err
			}
			if bp := c.String("base-path"); bp != "" && (!strings.HasPrefix(bp, "/") || strings.ContainsAny(bp, "?# ")) {
				return ucli.Exit(fmt.Sprintf("--base-path %q: the path must start with /, e.g. /sidekiq", bp), 2)
			}
			pool, v, err := openRedis(c, 8, log)
			if err != nil {
				return err
			}
			defer pool.Close()
			cfg := &web.Config{Pool: pool, ReadOnly: c.Bool("read-only"), BasicAuth: c.String("auth"),
				Token: c.String("token"), Logger: log, AllowHosts: webAllowHosts(addr, c.StringSlice("allow-host")),
				BasePath: strings.TrimSuffix(c.String("base-path"), "/")}
			if cfg.API, err = api.New(&api.Config{Pool: pool, Version: v}); err != nil {
				return err
			}
			l, err := cronLayout(c.Context, c, pool)
			if err != nil {
				return err
			}
			cfg.Cron = &cron.Store{Client: cfg.API.Client(), Layout: l}
			if urls := c.StringSlice("durable"); len(urls) > 0 {
				d, err := durable.New(&durable.Config{URLs: urls, Logger: log})
				if err != nil {
					return ucli.Exit(err.Error(), 2)
				}
				defer d.Close()
				cfg.Durable = d
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return ucli.Exit(fmt.Sprintf("--addr %s: %v (is another dashboard there? use --addr 127.0.0.1:0 for a free port)", addr, err), 2)
			}
			stop, err := serveWeb(ln, cfg, log)
			if err != nil {
				return err
			}
			defer stop()
			// SIGTERM (systemd, docker stop) and SIGINT stop it gracefully:
			// requests in flight finish, exit 0. Caught before the URL is
			// printed: whoever waits for it may stop the dashboard at once.
			ctx, cancel := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGINT)
			defer cancel()
			printWebURL(c.App.Writer, ln.Addr().String(), cfg)
			<-ctx.Done()
			return nil
		},
	}
}

// checkWebAddr refuses an address that is not HOST:PORT, and one open to
// other machines without --auth or --token.
func checkWebAddr(addr string, guarded bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return ucli.Exit(fmt.Sprintf("--addr %q: want HOST:PORT, e.g. 127.0.0.1:9292", addr), 2)
	}
	if guarded || host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return ucli.Exit(fmt.Sprintf("--addr %s is reachable from other machines: add --auth USER:PASSWORD or --token TOKEN (the dashboard can delete jobs)", addr), 2)
}

// webAllowHosts is --allow-host plus the host of --addr. The unspecified
// address (0.0.0.0, ::) names no host: it stands for this machine's
// addresses and its hostname, which are added instead.
func webAllowHosts(addr string, extra []string) []string {
	out := slices.Clone(extra)
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return out
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return append(out, host)
	}
	if name, err := os.Hostname(); err == nil && name != "" {
		out = append(out, name)
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				out = append(out, ipn.IP.String())
			}
		}
	}
	return out
}

// printWebURL prints where to open the dashboard (with the token once,
// when there is one: opening it sets the cookie).
func printWebURL(w io.Writer, addr string, cfg *web.Config) {
	u := "http://" + addr + cfg.BasePath + "/"
	if cfg.Token != "" {
		u += "?token=" + cfg.Token
	}
	extra := ""
	if cfg.ReadOnly {
		extra = " (read-only)"
	}
	fmt.Fprintf(w, "dashboard: %s%s\n", u, extra)
}
