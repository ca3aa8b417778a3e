package web

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

const (
	csrfCookie  = "gojob_csrf"
	csrfField   = "csrf"
	tokenCookie = "gojob_token"
)

// authenticate checks Config.BasicAuth and Config.Token (either is enough
// when both are set). It answers 401 itself and reports false when the
// request may not go on; a GET with the right ?token= sets the token cookie
// and redirects to the same URL without it.
func (h *handler) authenticate(w http.ResponseWriter, r *http.Request) bool {
	if h.cfg.BasicAuth == "" && h.cfg.Token == "" {
		return true
	}
	if h.cfg.BasicAuth != "" {
		if u, p, ok := r.BasicAuth(); ok && equal(u+":"+p, h.cfg.BasicAuth) {
			return true
		}
	}
	if h.cfg.Token != "" {
		if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && equal(b, h.cfg.Token) {
			return true
		}
		if c, err := r.Cookie(tokenCookie); err == nil && equal(c.Value, h.tokenCookieValue()) {
			return true
		}
		if q := r.URL.Query().Get("token"); q != "" && equal(q, h.cfg.Token) && r.Method == http.MethodGet {
			http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: h.tokenCookieValue(), Path: h.cookiePath(),
				HttpOnly: true, SameSite: http.SameSiteStrictMode})
			u := *r.URL
			qs := u.Query()
			qs.Del("token")
			u.RawQuery = qs.Encode()
			http.Redirect(w, r, h.base+u.RequestURI(), http.StatusSeeOther)
			return false
		}
	}
	if h.cfg.BasicAuth != "" {
		w.Header().Set("WWW-Authenticate", `Basic realm="gojob", charset="UTF-8"`)
	}
	http.Error(w, "authentication required: use the dashboard's user:password, or its token (Authorization: Bearer …, or open the URL printed with ?token=…)", http.StatusUnauthorized)
	return false
}

// tokenCookieValue is an HMAC of the token under the process's secret, so
// the cookie neither is nor reveals the token.
func (h *handler) tokenCookieValue() string {
	m := hmac.New(sha256.New, h.secret)
	m.Write([]byte(h.cfg.Token))
	return hex.EncodeToString(m.Sum(nil))
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// csrfToken returns the request's CSRF token: the HMAC, under the
// process's secret, of the random value in the gojob_csrf cookie (a
// request without one gets a new cookie). The form carries the HMAC, so a
// cookie the client made up does not come with a token it can compute.
func (h *handler) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) >= 16 {
		return h.csrfMAC(c.Value)
	}
	v := rand.Text()
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: v, Path: h.cookiePath(), HttpOnly: true, SameSite: http.SameSiteStrictMode})
	return h.csrfMAC(v)
}

func (h *handler) csrfMAC(v string) string {
	m := hmac.New(sha256.New, h.secret)
	m.Write([]byte("csrf:"))
	m.Write([]byte(v))
	return hex.EncodeToString(m.Sum(nil))
}

// validCSRF reports whether a POST carries, in its "csrf" form field or
// X-CSRF-Token header, the HMAC of its cookie's value. A page of another
// site can make the browser send the cookie but cannot read it, and even a
// client that sets the cookie itself cannot compute the HMAC without the
// server's secret.
func (h *handler) validCSRF(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	if err != nil || len(c.Value) < 16 {
		return false
	}
	got := r.Header.Get("X-CSRF-Token")
	if got == "" {
		got = r.PostFormValue(csrfField)
	}
	return got != "" && equal(got, h.csrfMAC(c.Value))
}

// cookiePath scopes the dashboard's cookies to its base path.
func (h *handler) cookiePath() string {
	if h.base == "" {
		return "/"
	}
	return h.base + "/"
}

// allowedHost reports whether a Host (or an Origin's host) names this
// dashboard: a loopback name, the listen address, or Config.AllowHosts.
// Checking it stops DNS rebinding: a page of evil.example whose name
// resolves to 127.0.0.1 reaches the port, but its requests carry
// Host: evil.example.
func (h *handler) allowedHost(hostport string) bool {
	host := hostport
	if hst, _, err := net.SplitHostPort(hostport); err == nil {
		host = hst
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if host == "" {
		return false
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	for _, a := range h.cfg.AllowHosts {
		a = strings.ToLower(strings.TrimSuffix(strings.Trim(a, "[]"), "."))
		if a == "*" || a == host {
			return true
		}
	}
	return false
}

// checkOrigin refuses a request whose Host is not the dashboard's, and a
// POST whose Origin (or, without one, Referer) is another site's.
func (h *handler) checkOrigin(r *http.Request) string {
	if !h.allowedHost(r.Host) {
		return fmt.Sprintf("host %q is not this dashboard's: open it by a loopback address or its listen address, or start gojob web with --allow-host NAME", r.Host)
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return ""
	}
	src := r.Header.Get("Origin")
	if src == "" {
		src = r.Header.Get("Referer")
	}
	if src == "" {
		return ""
	}
	u, err := url.Parse(src)
	if err != nil || u.Host == "" || !h.allowedHost(u.Host) {
		return fmt.Sprintf("origin %q is not this dashboard's: changes are accepted only from its own pages (when a proxy serves it under that name, start gojob web with --allow-host NAME)", src)
	}
	return ""
}

type csrfKey struct{}

func withCSRF(ctx context.Context, tok string) context.Context {
	return context.WithValue(ctx, csrfKey{}, tok)
}

func csrfFrom(ctx context.Context) string {
	s, _ := ctx.Value(csrfKey{}).(string)
	return s
}
