package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/api"
)

// setListFlags are the flags of gojob retries, scheduled and dead.
func setListFlags() []ucli.Flag {
	return append([]ucli.Flag{newRedisFlag(), newJSONFlag(),
		&ucli.IntFlag{Name: "limit", Value: 25, Usage: "entries to show"},
		&ucli.IntFlag{Name: "offset", Usage: "entries to skip (of the matching ones with a filter)"},
		queueFilterFlag(),
	}, filterFlags()...)
}

// entryActionFlags are the flags of gojob retry, kill and delete.
func entryActionFlags(action string) []ucli.Flag {
	flags := []ucli.Flag{newRedisFlag(), newJSONFlag(),
		&ucli.BoolFlag{Name: "all", Usage: "act on every job of the --from set (or every one --class, --jid, --error select) instead of one JID"},
		&ucli.StringFlag{Name: "from", Usage: "the set to act on: " + strings.Join(actionSets[action], ", ") + " (with --all, default " + actionSets[action][0] + ")"},
	}
	flags = append(flags, queueFilterFlag())
	flags = append(flags, filterFlags()...)
	switch action {
	case "delete":
		flags = append(flags, &ucli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "with --all: delete without asking (required when stdin is not a terminal)"})
	case "kill":
		flags = append(flags, &ucli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "with --all: kill even when the dead set's cap would drop jobs, without asking (required then when stdin is not a terminal)"})
	}
	return flags
}

// actionSets are the sets each action applies to; the first is --all's
// default (delete has none: --from is required).
var actionSets = map[string][]string{
	"retry":  {contract.KeyRetry, contract.KeyDead},
	"kill":   {contract.KeyRetry, contract.KeySchedule},
	"delete": {contract.KeyRetry, contract.KeySchedule, contract.KeyDead},
}

// parseSetName accepts a set's key or the command that lists it.
func parseSetName(s string) string {
	switch s {
	case "retries":
		return contract.KeyRetry
	case "scheduled":
		return contract.KeySchedule
	}
	return s
}

// setAction lists a set: Retries and Scheduled the next due first, Dead the
// newest first, as the Web UI (and JobSet.Page) does. With a filter, it
// counts every match and shows the --offset/--limit window of them in
// that order (api.JobSet.Page with a filter).
func setAction(name string) func(ctx context.Context, e *adminEnv) error {
	return func(ctx context.Context, e *adminEnv) error {
		set := e.set(name)
		f := filterFromFlags(e.c)
		var entries []*api.SortedEntry
		var matching, size int64
		var err error
		if f == nil {
			entries, size, err = set.Page(ctx, nil, e.c.Int("offset"), e.c.Int("limit"))
		} else if entries, matching, err = set.Page(ctx, f, e.c.Int("offset"), e.c.Int("limit")); err == nil {
			size, err = set.Size(ctx)
		}
		if err != nil {
			return err
		}
		if e.json {
			rows := make([]entryJSON, 0, len(entries))
			for _, en := range entries {
				rows = append(rows, toEntryJSON(name, en))
			}
			out := map[string]any{"size": size, "entries": rows}
			if f != nil {
				out["matching"] = matching
			}
			return e.printJSON(out)
		}
		if f == nil {
			fmt.Fprintf(e.out, "%s: %d\n", name, size)
		} else {
			fmt.Fprintf(e.out, "%s: %d of %d match %s\n", name, matching, size, filterString(f))
		}
		if len(entries) == 0 {
			return nil
		}
		tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "WHEN\tJID\tCLASS\tQUEUE\tERROR")
		for _, en := range entries {
			errText := ""
			if en.Job != nil && en.Job.ErrorClass() != "" {
				errText = en.Job.ErrorClass() + ": " + firstLine(en.Job.ErrorMessage(), 60)
			} else if en.Job == nil {
				errText = "(unparsable payload)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", textTime(en.At()), en.JID(), en.DisplayClass(), en.Queue, errText)
		}
		return tw.Flush()
	}
}

// entryAction acts on one job found by jid in the sets the action applies
// to (or the --from one), or with --all on every job of one set that the
// filter selects.
func entryAction(action string) func(ctx context.Context, e *adminEnv) error {
	return func(ctx context.Context, e *adminEnv) error {
		cmd := "gojob " + action
		sets := actionSets[action]
		if from := parseSetName(e.c.String("from")); from != "" {
			if !slices.Contains(sets, from) {
				return usageError(cmd, fmt.Sprintf("--from %s: want one of %s", e.c.String("from"), strings.Join(sets, ", ")))
			}
			sets = []string{from}
		}
		f := filterFromFlags(e.c)
		jid := e.c.Args().First()
		switch {
		case e.c.Bool("all") && jid != "":
			return usageError(cmd, "give a JID or --all, not both")
		case e.c.Bool("all"):
			if action == "delete" && !e.c.IsSet("from") {
				return usageError(cmd, "delete --all needs --from "+strings.Join(sets, "|"))
			}
			return bulkAction(ctx, e, action, sets[0], f)
		case jid == "":
			return usageError(cmd, "JID (or --all) is required")
		case f != nil:
			return usageError(cmd, "--queue, --class, --jid, --error and --search select jobs for --all")
		}
		for _, name := range sets {
			en, err := e.set(name).FindJob(ctx, jid)
			if errors.Is(err, api.ErrJobNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			var dropped int64
			if err := act(ctx, action, en, &dropped); err != nil {
				return err
			}
			if e.json {
				out := map[string]any{"action": action, "jid": jid, "from": name}
				if action == "kill" {
					out["dropped"] = dropped
				}
				return e.printJSON(out)
			}
			fmt.Fprintf(e.out, "%s %s (%s) from %s\n", pastTense(action), jid, en.Class(), name)
			if dropped > 0 {
				fmt.Fprintf(e.out, "the dead set's cap dropped %d %s, the oldest (%s)\n", dropped, plural(int(dropped), "job", "jobs"), deadCapNote(e))
			}
			return nil
		}
		return ucli.Exit(fmt.Sprintf("%s: no job %s in %s", action, jid, strings.Join(sets, ", ")), exitNotFound)
	}
}

// act applies action to one entry; a kill adds the dead-set entries the
// cap dropped to *dropped.
func act(ctx context.Context, action string, en *api.SortedEntry, dropped *int64) error {
	var err error
	switch action {
	case "retry":
		_, err = en.Retry(ctx)
	case "kill":
		var n int64
		n, err = en.Kill(ctx, nil)
		*dropped += n
	case "delete":
		var ok bool
		if ok, err = en.Delete(ctx); err == nil && !ok {
			err = api.ErrJobNotFound
		}
	}
	return err
}

// killDrops is how many dead jobs killing n jobs now drops to keep the
// dead set within its limits (contract.KillDrops).
func killDrops(ctx context.Context, e *adminEnv, n int64) (int64, error) {
	conn, err := e.pool.GetContext(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	return contract.KillDrops(ctx, conn, time.Now(), e.api.DeadLimits(), n)
}

// deadCapNote explains the dead set's cap in a sentence's tail.
func deadCapNote(e *adminEnv) string {
	lim := e.api.DeadLimits()
	return fmt.Sprintf("the dead set keeps at most %d jobs for %s (Sidekiq's dead_max_jobs and dead_timeout_in_seconds)",
		lim.MaxJobs-1, humanDays(lim.Timeout))
}

// humanDays is a duration in days when it is whole days.
func humanDays(d time.Duration) string {
	if d >= 24*time.Hour && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	}
	return d.String()
}

// bulkAction applies action to every entry of set name the filter
// selects (api.JobSet.Bulk: the Web UI's Retry All, Kill All, Delete All,
// scoped to the filter), and says what happened: how many it moved, how
// many were gone meanwhile or left in place (not a job), and for a kill
// how many dead-set entries the cap dropped. A kill that would make the
// cap drop jobs asks first, as delete --all does (docs/cli.md).
func bulkAction(ctx context.Context, e *adminEnv, action, name string, f *api.Filter) error {
	set := e.set(name)
	what := "every job of " + name
	if f != nil {
		what = "the jobs of " + name + " matching " + filterString(f)
	}
	if action == "delete" {
		if err := confirm(e.c, "Delete "+what+"?"); err != nil {
			return err
		}
	}
	if action == "kill" {
		var n int64
		var err error
		if f == nil {
			n, err = set.Size(ctx)
		} else {
			_, n, err = set.Page(ctx, f, 0, 1)
		}
		if err != nil {
			return err
		}
		drops, err := killDrops(ctx, e, n)
		if err != nil {
			return err
		}
		if drops > 0 {
			q := fmt.Sprintf("Killing %d %s drops %d dead %s: %s. Kill %s?", n, plural(int(n), "job", "jobs"),
				drops, plural(int(drops), "job", "jobs"), deadCapNote(e), what)
			if err := confirm(e.c, q); err != nil {
				return err
			}
		}
	}
	var progress func(*api.BulkActionResult) error
	if !e.json && isTerminal(e.c.App.ErrWriter) {
		var shown time.Time
		progress = func(r *api.BulkActionResult) error {
			if now := time.Now(); now.Sub(shown) >= 100*time.Millisecond {
				shown = now
				fmt.Fprintf(e.c.App.ErrWriter, "\r%s %d…", pastTense(action), r.Moved)
			}
			return nil
		}
	}
	n, err := set.Bulk(ctx, action, f, progress)
	if progress != nil {
		fmt.Fprintln(e.c.App.ErrWriter)
	}
	if err != nil {
		return fmt.Errorf("%s --all from %s stopped after %d: %w", action, name, n.Moved, err)
	}
	if e.json {
		out := map[string]any{"action": action, "from": name, "count": n.Moved, "gone": n.Gone, "left": n.Left}
		if action == "kill" {
			out["dropped"] = n.Dropped
		}
		if f != nil {
			out["filter"] = filterJSON(f)
		}
		return e.printJSON(out)
	}
	fmt.Fprintf(e.out, "%s %d %s from %s\n", pastTense(action), n.Moved, plural(n.Moved, "job", "jobs"), name)
	if n.Dropped > 0 {
		fmt.Fprintf(e.out, "the dead set's cap dropped %d %s, the oldest (%s)\n", n.Dropped, plural(int(n.Dropped), "job", "jobs"), deadCapNote(e))
	}
	if n.Gone > 0 {
		fmt.Fprintf(e.out, "%d %s gone meanwhile (processed, moved or deleted elsewhere)\n", n.Gone, plural(n.Gone, "was", "were"))
	}
	if n.Left > 0 {
		fmt.Fprintf(e.out, "%d left in %s: not a job (unparsable payload)\n", n.Left, name)
	}
	return nil
}

// entryJSON is how an entry is printed with --json.
type entryJSON struct {
	Set   string    `json:"set"`
	Score float64   `json:"score"`
	At    time.Time `json:"at"`
	JID   string    `json:"jid"`
	Class string    `json:"class"`
	// DisplayClass, DisplayArgs and ActiveJobID are what Sidekiq's Web UI
	// shows (JobRecord.DisplayClass): an ActiveJob's wrapped class and its own
	// arguments.
	DisplayClass string          `json:"display_class"`
	DisplayArgs  json.RawMessage `json:"display_args,omitempty"`
	ActiveJobID  string          `json:"active_job_id,omitempty"`
	Queue        string          `json:"queue"`
	ErrorClass   string          `json:"error_class,omitempty"`
	ErrorMessage string          `json:"error_message,omitempty"`
	RetryCount   *int            `json:"retry_count,omitempty"`
	Payload      json.RawMessage `json:"payload,omitempty"`
	Raw          string          `json:"raw,omitempty"`
}

func toEntryJSON(set string, en *api.SortedEntry) entryJSON {
	out := entryJSON{Set: set, Score: en.Score, At: en.At().UTC(), JID: en.JID(), Class: en.Class(), Queue: en.Queue}
	if en.Job == nil {
		out.Raw = string(en.Value)
		return out
	}
	out.Payload = json.RawMessage(en.Value)
	out.DisplayClass, out.DisplayArgs, out.ActiveJobID = en.DisplayClass(), displayArgsJSON(en.Job), contract.ActiveJobID(en.Job)
	out.ErrorClass = en.Job.ErrorClass()
	out.ErrorMessage = en.Job.ErrorMessage()
	if c, ok := en.Job.RetryCount(); ok {
		out.RetryCount = &c
	}
	return out
}

// pastTense is what an action did: "retried".
func pastTense(a string) string {
	switch a {
	case "retry":
		return "retried"
	case "kill":
		return "killed"
	}
	return "deleted"
}
