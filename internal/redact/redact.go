// Package redact hides the credentials of connection URLs in what gojob
// prints: errors, logs, help texts and dashboard pages. A credential is the
// password of the userinfo and the value of a query parameter that carries
// one (?password=, ?sslpassword=, ?token=, ?secret=, ?api_key= …: libpq and
// the Redis URL formats accept them there too).
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// The userinfo of a URL that net/url cannot parse: scheme://[user]:pass@.
var rawUserinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^:@/]*):[^@/]*@`)

// secretParam is a query parameter that carries a credential, with its
// value: a name holding pass, pwd, secret or token, or a usual key name.
var secretParam = regexp.MustCompile(`(?i)([?&;](?:[a-z0-9_.\-]*(?:pass|pwd|secret|token|credential)[a-z0-9_.\-]*|auth|api_?key|access_?key)=)([^&#;\s"']*)`)

const mask = "xxxxx"

// URL returns raw with its password, and the values of its credential
// query parameters, replaced by "xxxxx", also when raw is not a valid URL.
func URL(raw string) string {
	out := raw
	if u, err := url.Parse(raw); err == nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), mask)
			out = u.String()
		}
	} else {
		out = rawUserinfo.ReplaceAllString(raw, "$1:"+mask+"@")
	}
	return secretParam.ReplaceAllString(out, "${1}"+mask)
}

// String replaces every occurrence of raw, and of its credentials, in s by
// the redacted form (for error texts that quote a URL).
func String(s, raw string) string {
	if raw == "" {
		return s
	}
	s = strings.ReplaceAll(s, raw, URL(raw))
	for _, pw := range secrets(raw) {
		s = strings.ReplaceAll(s, pw, mask)
		if esc := url.QueryEscape(pw); esc != pw {
			s = strings.ReplaceAll(s, esc, mask)
		}
	}
	return s
}

// secrets returns the password of raw, parsed or not, and the values of
// its credential query parameters (each at least 4 bytes, so a short value
// does not mask unrelated text).
func secrets(raw string) []string {
	var out []string
	if u, err := url.Parse(raw); err == nil {
		if pw, _ := u.User.Password(); pw != "" {
			out = append(out, pw)
		}
	} else if m := regexp.MustCompile(`://[^:@/]*:([^@/]*)@`).FindStringSubmatch(raw); m != nil && m[1] != "" {
		out = append(out, m[1])
	}
	for _, m := range secretParam.FindAllStringSubmatch(raw, -1) {
		v := m[2]
		if dec, err := url.QueryUnescape(v); err == nil {
			v = dec
		}
		if len(v) >= 4 {
			out = append(out, v)
		}
	}
	return out
}
