package cli

import "time"

// textTimeLayout is how the CLI's text output prints a moment: UTC with
// its zone named, the zone --json prints (RFC 3339 in UTC), so a line of
// text and a JSON field of the same moment read alike on any machine.
const textTimeLayout = "2006-01-02 15:04:05 UTC"

// textTime formats t for text output; the zero time is "-".
func textTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(textTimeLayout)
}
