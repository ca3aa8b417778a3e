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
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gojob/gojob/internal/monoclock"
	"github.com/gojob/gojob/metrics"
	"github.com/gojob/gojob/sidejob"
	"github.com/gojob/gojob/sidekiq/api"
)

// New returns the dashboard's HTTP handler. It is safe for concurrent use.
func New(cfg *Config) (http.Handler, error) {
	if cfg == nil {
		return nil, errors.New("web: nil Config")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	h := &handler{cfg: *cfg, api: cfg.API, sj: cfg.SideJob, clock: monoclock.Or(cfg.Clock), base: cfg.BasePath}
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
