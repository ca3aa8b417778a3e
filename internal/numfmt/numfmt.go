// Package numfmt formats numbers for people: the dashboard's pages and
// gojob top's screen.
package numfmt

import (
	"strconv"
	"strings"
)

// Int formats n with thousands separators: 1,234,567.
func Int(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
