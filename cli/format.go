package cli

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// The text the commands print: times, counts, a job's class and arguments.

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

// plural is one or many by n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// firstLine is the first line of s, cut to max runes.
func firstLine(s string, max int) string {
	s, _, _ = strings.Cut(s, "\n")
	if r := []rune(s); len(r) > max {
		return string(r[:max]) + "…"
	}
	return s
}

// jobClass is the class a person reads (JobRecord.DisplayClass): an
// ActiveJob's wrapped class, a mailer's "Mailer#method".
func jobClass(j *wire.Job) string { return (&api.JobRecord{Job: j}).DisplayClass() }

// displayArgsJSON is JobRecord.DisplayArgs as a JSON array.
func displayArgsJSON(j *wire.Job) json.RawMessage {
	return json.RawMessage(rubyjson.ArrayValue((&api.JobRecord{Job: j}).DisplayArgs()...).Encode())
}
