// Package redact hides the passwords of connection URLs in what gojob
// prints: errors, logs and help texts.
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// The userinfo of a URL that net/url cannot parse: scheme://[user]:pass@.
var rawUserinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^:@/]*):[^@/]*@`)

// URL returns raw with its password replaced by "xxxxx", also when raw is
// not a valid URL.
func URL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		if _, has := u.User.Password(); has {
			return u.Redacted()
		}
		return raw
	}
	return rawUserinfo.ReplaceAllString(raw, "$1:xxxxx@")
}

// String replaces every occurrence of raw, and of its password, in s by
// the redacted form (for error texts that quote a URL).
func String(s, raw string) string {
	if raw == "" {
		return s
	}
	s = strings.ReplaceAll(s, raw, URL(raw))
	if pw := password(raw); pw != "" {
		s = strings.ReplaceAll(s, pw, "xxxxx")
		if esc := url.QueryEscape(pw); esc != pw {
			s = strings.ReplaceAll(s, esc, "xxxxx")
		}
	}
	return s
}

// password returns the password of raw, parsed or not.
func password(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		pw, _ := u.User.Password()
		return pw
	}
	if m := regexp.MustCompile(`://[^:@/]*:([^@/]*)@`).FindStringSubmatch(raw); m != nil {
		return m[1]
	}
	return ""
}
