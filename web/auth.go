package web

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
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
			http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: h.tokenCookieValue(), Path: "/",
				HttpOnly: true, SameSite: http.SameSiteStrictMode})
			u := *r.URL
			qs := u.Query()
			qs.Del("token")
			u.RawQuery = qs.Encode()
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
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

// csrfToken returns the request's CSRF token, the value of the gojob_csrf
// cookie; a request without one gets a new random cookie.
func (h *handler) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) >= 16 {
		return c.Value
	}
	tok := rand.Text()
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: tok, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	return tok
}

// validCSRF reports whether a POST carries the token of its cookie in its
// "csrf" form field or X-CSRF-Token header (double-submit: a page of
// another site can make the browser send the cookie, but cannot read it to
// put it in the form).
func validCSRF(r *http.Request, cookieTok string) bool {
	if _, err := r.Cookie(csrfCookie); err != nil {
		return false
	}
	got := r.Header.Get("X-CSRF-Token")
	if got == "" {
		got = r.PostFormValue(csrfField)
	}
	return got != "" && equal(got, cookieTok)
}

type csrfKey struct{}

func withCSRF(ctx context.Context, tok string) context.Context {
	return context.WithValue(ctx, csrfKey{}, tok)
}

func csrfFrom(ctx context.Context) string {
	s, _ := ctx.Value(csrfKey{}).(string)
	return s
}
