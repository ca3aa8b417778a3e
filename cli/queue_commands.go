package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/api"
)

// queueCommand is gojob queue: a queue's jobs, clearing it, and gojob's
// pause.
func queueCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "queue",
		Usage: "list a queue's jobs, clear it, pause or unpause it",
		Subcommands: []*ucli.Command{
			{Name: "jobs", Usage: "list the jobs of queue NAME (newest first, as the Web UI)", ArgsUsage: "NAME",
				Flags: append([]ucli.Flag{newRedisFlag(), newJSONFlag(),
					&ucli.IntFlag{Name: "limit", Value: 25, Usage: "jobs to show"},
					&ucli.IntFlag{Name: "offset", Usage: "jobs to skip (of the matching ones with a filter)"},
				}, filterFlags()...),
				Before: checkPageFlags, Action: withAPI(queueJobsAction)},
			{Name: "clear", Usage: "delete every job of queue NAME and the queue (the Web UI's Delete)", ArgsUsage: "NAME",
				Flags: []ucli.Flag{newRedisFlag(), newJSONFlag(),
					&ucli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "clear without asking (required when stdin is not a terminal)"}},
				Action: withAPI(queueClearAction)},
			{Name: "pause", Usage: "stop gojob processes fetching from NAME within a second (Ruby processes too with contrib/ruby/gojob.rb, docs/queue-pause.md)", ArgsUsage: "NAME",
				Flags: []ucli.Flag{newRedisFlag(), newJSONFlag()}, Action: withAPI(queuePauseAction(true))},
			{Name: "unpause", Usage: "let gojob processes fetch from NAME again", ArgsUsage: "NAME",
				Flags: []ucli.Flag{newRedisFlag(), newJSONFlag()}, Action: withAPI(queuePauseAction(false))},
		},
	}
}

// queueArg returns the one queue NAME of a queue subcommand.
func queueArg(c *ucli.Context) (string, error) {
	if c.NArg() != 1 || c.Args().First() == "" {
		return "", usageError(commandPath(c), "one queue NAME is required")
	}
	return c.Args().First(), nil
}

// knownQueue returns an exit-4 error when name is neither in the queues
// set nor holds jobs: most likely a typo.
func knownQueue(ctx context.Context, e *adminEnv, name string, size int64) error {
	if size > 0 {
		return nil
	}
	qs, err := e.api.Queues(ctx)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(qs, func(q *api.Queue) bool { return q.Name() == name }) {
		return nil
	}
	return ucli.Exit(fmt.Sprintf("no queue %s (see gojob queues)", name), exitNotFound)
}

func queueJobsAction(ctx context.Context, e *adminEnv) error {
	name, err := queueArg(e.c)
	if err != nil {
		return err
	}
	q := e.api.Queue(name)
	f := filterFromFlags(e.c)
	var jobs []*api.JobRecord
	var matching, size int64
	if f == nil {
		jobs, size, err = q.Page(ctx, nil, e.c.Int("offset"), e.c.Int("limit"))
	} else if size, err = q.Size(ctx); err == nil {
		jobs, matching, err = q.Page(ctx, f, e.c.Int("offset"), e.c.Int("limit"))
	}
	if err != nil {
		return err
	}
	if err := knownQueue(ctx, e, name, size); err != nil {
		return err
	}
	if e.json {
		type row struct {
			JID        string          `json:"jid"`
			Class      string          `json:"class"`
			Args       json.RawMessage `json:"display_args,omitempty"`
			JobID      string          `json:"active_job_id,omitempty"`
			EnqueuedAt *time.Time      `json:"enqueued_at"`
			Payload    json.RawMessage `json:"payload,omitempty"`
			Raw        string          `json:"raw,omitempty"`
		}
		rows := make([]row, 0, len(jobs))
		for _, r := range jobs {
			if r.Job == nil {
				rows = append(rows, row{Raw: string(r.Value)})
				continue
			}
			out := row{JID: r.Job.JID(), Class: jobClass(r.Job), Args: displayArgsJSON(r.Job), JobID: contract.ActiveJobID(r.Job), Payload: json.RawMessage(r.Value)}
			if t, ok := r.Job.Time("enqueued_at"); ok {
				t = t.UTC()
				out.EnqueuedAt = &t
			}
			rows = append(rows, out)
		}
		res := map[string]any{"queue": name, "size": size, "jobs": rows}
		if f != nil {
			res["matching"] = matching
		}
		return e.printJSON(res)
	}
	if f == nil {
		fmt.Fprintf(e.out, "queue %s: %d %s\n", name, size, plural(int(size), "job", "jobs"))
	} else {
		fmt.Fprintf(e.out, "queue %s: %d of %d match %s\n", name, matching, size, filterString(f))
	}
	if len(jobs) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ENQUEUED\tJID\tCLASS\tARGS")
	for _, r := range jobs {
		if r.Job == nil {
			fmt.Fprintf(tw, "-\t-\t-\t(unparsable payload) %s\n", firstLine(string(r.Value), 60))
			continue
		}
		at, _ := r.Job.Time("enqueued_at")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", textTime(at), r.Job.JID(), jobClass(r.Job), firstLine(string(displayArgsJSON(r.Job)), 60))
	}
	return tw.Flush()
}

func queueClearAction(ctx context.Context, e *adminEnv) error {
	name, err := queueArg(e.c)
	if err != nil {
		return err
	}
	q := e.api.Queue(name)
	size, err := q.Size(ctx)
	if err != nil {
		return err
	}
	if err := knownQueue(ctx, e, name, size); err != nil {
		return err
	}
	if err := confirm(e.c, fmt.Sprintf("Delete queue %s and its %d %s?", name, size, plural(int(size), "job", "jobs"))); err != nil {
		return err
	}
	if err := q.Clear(ctx); err != nil {
		return err
	}
	if e.json {
		return e.printJSON(map[string]any{"queue": name, "cleared": true, "size": size})
	}
	fmt.Fprintf(e.out, "cleared queue %s (%d %s)\n", name, size, plural(int(size), "job", "jobs"))
	return nil
}

func queuePauseAction(pause bool) func(ctx context.Context, e *adminEnv) error {
	return func(ctx context.Context, e *adminEnv) error {
		name, err := queueArg(e.c)
		if err != nil {
			return err
		}
		q := e.api.Queue(name)
		verb := "paused"
		if pause {
			err = q.Pause(ctx)
		} else {
			err, verb = q.Unpause(ctx), "unpaused"
		}
		if err != nil {
			return err
		}
		if e.json {
			return e.printJSON(map[string]any{"queue": name, "paused": pause})
		}
		fmt.Fprintf(e.out, "%s queue %s for gojob processes\n", verb, name)
		return nil
	}
}
