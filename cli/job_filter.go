package cli

import (
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/sidekiq/api"
)

// filterFlags select jobs of a listing or a bulk action by class, jid,
// error text and any text of the payload (api.Filter).
func filterFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "class", Usage: "only jobs of this `CLASS`: the class, an ActiveJob's wrapped class, or a mailer job's mailer (or Mailer#method)"},
		&ucli.StringFlag{Name: "jid", Usage: "only the job with this `JID`"},
		&ucli.StringFlag{Name: "error", Usage: "only jobs whose error class or message contains `TEXT` (any case)"},
		&ucli.StringFlag{Name: "search", Usage: "only jobs whose stored JSON contains `TEXT` (case-sensitive), as the Web UI's search"},
	}
}

// queueFilterFlag selects the jobs of a set by their queue.
func queueFilterFlag() ucli.Flag {
	return &ucli.StringFlag{Name: "queue", Aliases: []string{"q"}, Usage: "only jobs of queue `NAME`"}
}

// filterFromFlags is the filter the flags select, nil for every job.
func filterFromFlags(c *ucli.Context) *api.Filter {
	f := api.Filter{Class: c.String("class"), JID: c.String("jid"), Error: strings.ToLower(c.String("error")),
		Text: c.String("search"), Queue: c.String("queue")}
	if f == (api.Filter{}) {
		return nil
	}
	return &f
}

// filterString describes the filter for text output: "class=X error=Y".
func filterString(f *api.Filter) string {
	var parts []string
	for _, p := range [][2]string{{"queue", f.Queue}, {"class", f.Class}, {"jid", f.JID}, {"error", f.Error}, {"search", f.Text}} {
		if p[1] != "" {
			parts = append(parts, p[0]+"="+p[1])
		}
	}
	return strings.Join(parts, " ")
}

// filterJSON is the filter in a bulk action's JSON result.
func filterJSON(f *api.Filter) map[string]string {
	out := map[string]string{"queue": f.Queue, "class": f.Class, "jid": f.JID, "error": f.Error}
	if f.Text != "" {
		out["search"] = f.Text
	}
	return out
}
