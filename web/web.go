// Package web is gojob's dashboard: server-rendered pages over Sidekiq's
// data in Redis, read and written through the admin API (sidekiq/api), so
// Ruby and Go processes show alike. Besides what Sidekiq's own Web UI shows
// (dashboard, busy, queues, retries, scheduled, dead, metrics) it shows
// SideJob job trees, ordered queues (package ordered), sidekiq-cron jobs
// and, when given a durable database, its rows. It also serves the cluster-wide Prometheus gauges at /metrics.
//
// Every request must name the dashboard in its Host header (a loopback
// name, or one of Config.AllowHosts), which stops DNS-rebinding pages.
// Every mutation is a POST from the dashboard's own origin carrying a CSRF
// token: the HMAC, under a secret of the process, of a random cookie.
// Config.ReadOnly hides and refuses them. Config.BasicAuth and Config.Token
// guard every page. docs/web.md describes the pages.
package web

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/gomodule/redigo/redis"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/cron"
	"github.com/gojob/gojob/durable"
	"github.com/gojob/gojob/metrics"
	"github.com/gojob/gojob/sidejob"
	"github.com/gojob/gojob/sidekiq/api"
)

// Config configures the dashboard.
type Config struct {
	// Pool is the Redis pool shared with Sidekiq. Required.
	Pool *redis.Pool
	// API reads and changes the jobs. Default api.New on Pool.
	API *api.API
	// SideJob reads SideJob jobs. Default sidejob.NewClient on Pool.
	SideJob *sidejob.Client
	// Cron, when set, adds the Cron page (sidekiq-cron's jobs).
	Cron *cron.Store
	// Durable, when set, adds the Durable page (its rows and the jobs its
	// reconciler found lost).
	Durable *durable.Durable
	// ReadOnly hides every button and refuses every POST.
	ReadOnly bool
	// BasicAuth is "user:password": every request must carry it (HTTP basic
	// authentication). Empty: no basic authentication.
	BasicAuth string
	// Token, when set, must come as "Authorization: Bearer <token>", the
	// gojob_token cookie, or once as ?token=<token> (which sets the
	// cookie). With BasicAuth too, either one is enough.
	Token string
	// AllowHosts are the host names (or IP addresses) besides the loopback
	// ones that requests may name in their Host and Origin headers: the
	// listen address and the names a proxy forwards. "*" allows any host
	// (only behind a proxy that checks it). Other hosts get 403.
	AllowHosts []string
	// BasePath is the path prefix the dashboard is mounted under behind a
	// proxy ("/sidekiq"): every link, form, asset and redirect starts with
	// it. Requests may come with or without it. Empty: the root.
	BasePath string
	// Clock is the time source. Default the system clock.
	Clock clock.Clock
	// Logger logs failed requests. Default zerolog.Nop().
	Logger zerolog.Logger
}

func (c *Config) validate() error {
	if c.Pool == nil {
		return errors.New("web: Config.Pool is required")
	}
	if c.BasePath != "" && (!strings.HasPrefix(c.BasePath, "/") || strings.HasSuffix(c.BasePath, "/") ||
		strings.ContainsAny(c.BasePath, "?#\"\\ ")) {
		return fmt.Errorf("web: Config.BasePath %q must start with / and not end with one, e.g. /sidekiq", c.BasePath)
	}
	if c.BasicAuth != "" {
		if u, p, ok := strings.Cut(c.BasicAuth, ":"); !ok || u == "" || p == "" {
			return errors.New("web: Config.BasicAuth must be user:password")
		}
	}
	return nil
}

// handler serves the dashboard. It is safe for concurrent use.
type handler struct {
	cfg   Config
	api   *api.API
	sj    *sidejob.Client
	clock clock.Clock
	mux   *http.ServeMux
	pages *pageSet
	// secret keys the token cookie (so the cookie is not the token) and
	// the CSRF tokens.
	secret []byte
	// base is Config.BasePath.
	base string
	bulk *bulkRunner
}

// New returns the dashboard's HTTP handler. It is safe for concurrent use.
func New(cfg *Config) (http.Handler, error) {
	if cfg == nil {
		return nil, errors.New("web: nil Config")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	h := &handler{cfg: *cfg, api: cfg.API, sj: cfg.SideJob, clock: clock.Or(cfg.Clock), base: cfg.BasePath}
	if h.api == nil {
		a, err := api.New(&api.Config{Pool: cfg.Pool, Clock: cfg.Clock})
		if err != nil {
			return nil, err
		}
		h.api = a
	}
	if h.sj == nil {
		sj, err := sidejob.NewClient(&sidejob.Config{Pool: cfg.Pool, Sidekiq: h.api.Client(), Clock: cfg.Clock})
		if err != nil {
			return nil, err
		}
		h.sj = sj
	}
	h.secret = make([]byte, 32)
	if _, err := rand.Read(h.secret); err != nil {
		return nil, err
	}
	pages, err := parsePages(cfg.BasePath)
	if err != nil {
		return nil, err
	}
	h.pages = pages
	h.bulk = newBulkRunner(h)
	h.routes()
	return h, nil
}

func (h *handler) routes() {
	m := http.NewServeMux()
	m.Handle("GET /static/", http.StripPrefix("/static/", staticFiles(staticFS())))
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCluster(h.api), metrics.BuildInfo())
	m.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m.HandleFunc("GET /{$}", h.dashboard)
	m.HandleFunc("GET /stats.json", h.statsJSON)
	m.HandleFunc("GET /busy", h.busy)
	m.HandleFunc("POST /busy", h.busyAction)
	m.HandleFunc("GET /queues", h.queues)
	m.HandleFunc("GET /queues/{name}", h.queue)
	m.HandleFunc("POST /queues/{name}", h.queueAction)
	for _, s := range setKinds {
		m.HandleFunc("GET /"+s.Path, h.setList(s))
		m.HandleFunc("POST /"+s.Path, h.setBulk(s))
		m.HandleFunc("GET /"+s.Path+"/bulk.json", h.bulkJSON(s))
		m.HandleFunc("GET /"+s.Path+"/{key}", h.setEntry(s))
		m.HandleFunc("POST /"+s.Path+"/{key}", h.setEntryAction(s))
	}
	m.HandleFunc("GET /job-metrics", h.jobMetrics)
	m.HandleFunc("GET /job-metrics/{class}", h.jobMetricsClass)
	m.HandleFunc("GET /sidejob", h.sidejobTree)
	m.HandleFunc("GET /sidejob/{id}", h.sidejobJob)
	m.HandleFunc("GET /cron", h.cronList)
	m.HandleFunc("POST /cron/{name}", h.cronAction)
	m.HandleFunc("GET /durable", h.durablePage)
	m.HandleFunc("GET /ordered", h.orderedList)
	m.HandleFunc("GET /ordered/{queue}", h.orderedQueue)
	m.HandleFunc("POST /ordered/{queue}", h.orderedAction)
	m.HandleFunc("GET /batches", h.batchList)
	m.HandleFunc("GET /batches/{bid}", h.batchPage)
	m.HandleFunc("GET /jobs/{jid}", h.jobPage)
	m.HandleFunc("POST /jobs/{jid}/cancel", h.jobCancel)
	h.mux = m
}

// ServeHTTP checks the Host (and a POST's Origin), strips the base path,
// authenticates, checks POSTs (read-only mode, CSRF token), sets the
// security headers and serves the page.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if msg := h.checkOrigin(r); msg != "" {
		http.Error(w, msg, http.StatusForbidden)
		return
	}
	if h.base != "" {
		if r.URL.Path == h.base {
			http.Redirect(w, r, h.base+"/", http.StatusMovedPermanently)
			return
		}
		if rest, ok := strings.CutPrefix(r.URL.Path, h.base+"/"); ok {
			r2 := new(http.Request)
			*r2 = *r
			u := *r.URL
			u.Path, u.RawPath = "/"+rest, ""
			r2.URL = &u
			r = r2
		}
	}
	if !h.authenticate(w, r) {
		return
	}
	hd := w.Header()
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'")
	tok := h.csrfToken(w, r)
	if r.Method == http.MethodPost {
		if h.cfg.ReadOnly {
			http.Error(w, "read-only dashboard: changes are disabled (started with --read-only)", http.StatusForbidden)
			return
		}
		if !h.validCSRF(r) {
			http.Error(w, "missing or wrong CSRF token: reload the page and try again", http.StatusForbidden)
			return
		}
	} else if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	h.mux.ServeHTTP(w, r.WithContext(withCSRF(r.Context(), tok)))
}

// fail logs err and shows a sentence about it: never the raw Redis or
// database error, which is in the log (redisProblem).
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	h.cfg.Logger.Error().Err(err).Str("component", "web").Str("path", r.URL.Path).Msg("request failed")
	http.Error(w, problem(err), http.StatusInternalServerError)
}

// notFound shows a 404 page with what was not found.
func notFound(w http.ResponseWriter, what string) {
	http.Error(w, what+" not found (it may have been processed, moved or deleted meanwhile)", http.StatusNotFound)
}

// redirectBack sends the browser to path (a dashboard path without the
// base path) with a flash message (POST, redirect, GET).
func (h *handler) redirectBack(w http.ResponseWriter, r *http.Request, path, msg string) {
	u := h.base + path
	if msg != "" {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		u += sep + "flash=" + url.QueryEscape(msg)
	}
	http.Redirect(w, r, u, http.StatusSeeOther)
}

// backPath is where a form came from: its "back" field (a dashboard path
// without the base path) when it is a local path, else def.
func backPath(r *http.Request, def string) string {
	b := r.PostFormValue("back")
	if strings.HasPrefix(b, "/") && !strings.HasPrefix(b, "//") && !strings.Contains(b, "\\") {
		// Drop an old flash so messages do not pile up.
		if u, err := url.Parse(b); err == nil {
			q := u.Query()
			q.Del("flash")
			u.RawQuery = q.Encode()
			return u.String()
		}
	}
	return def
}

// plural returns "1 job" / "3 jobs" / "1,234 processes".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return num(int64(n)) + " " + pluralWord(word)
}

// pluralWord is the plural of an English noun phrase's last word.
func pluralWord(word string) string {
	if strings.HasSuffix(word, "s") || strings.HasSuffix(word, "x") || strings.HasSuffix(word, "ch") {
		return word + "es"
	}
	return word + "s"
}
