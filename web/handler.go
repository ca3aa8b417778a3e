package web

import (
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strings"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/sidejob"
	"github.com/gojob/gojob/sidekiq/api"
)

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

// fail logs err and shows a sentence about it: never the raw Redis or
// database error, which is in the log (redisProblem).
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	h.cfg.Logger.Error().Err(err).Str("component", "web").Str("path", r.URL.Path).Msg("request failed")
	http.Error(w, problem(err), http.StatusInternalServerError)
}

// failed answers a request whose step ended in err and reports whether it
// did: a 404 naming what when err is one of gone, a 500 (fail) for any
// other error, nothing when err is nil.
func (h *handler) failed(w http.ResponseWriter, r *http.Request, err error, what string, gone ...error) bool {
	if err == nil {
		return false
	}
	for _, g := range gone {
		if errors.Is(err, g) {
			notFound(w, what)
			return true
		}
	}
	h.fail(w, r, err)
	return true
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

// pageSet holds one template per page, each the layout plus that page's
// "content" (parsePages, render.go).
type pageSet struct{ pages map[string]*template.Template }
