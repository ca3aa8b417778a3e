package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/cli/internal/procsignal"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/queuelist"
)

// adminCommands returns the commands built on the admin API.
func adminCommands() []*ucli.Command {
	return []*ucli.Command{
		{
			Name:      "push",
			Usage:     "push a job (each ARG is JSON; text that is not JSON is a string); push - pushes a job per JSON line of stdin",
			ArgsUsage: "CLASS [ARG...] | -",
			Flags: append([]ucli.Flag{newRedisFlag(), newVersionFlag(), newJSONFlag(),
				&ucli.StringFlag{Name: "queue", Aliases: []string{"q"}, Value: "default", Usage: "queue"},
				&ucli.StringFlag{Name: "retry", Usage: "true, false or a number of retries (default true)"},
				&ucli.DurationFlag{Name: "in", Usage: "schedule after this delay"},
				&ucli.StringFlag{Name: "at", Usage: "schedule at this time (RFC 3339 or epoch seconds)"},
				&ucli.DurationFlag{Name: "expires-in", Usage: "drop the job unrun when it has not started this long after it is due (Sidekiq Pro's expires_in)"},
				&ucli.Float64Flag{Name: "unique-for", Usage: "push only if no job of this class, queue and arguments holds the unique lock; the lock lasts `SECONDS` (exit 5 when not pushed)"},
				&ucli.Float64Flag{Name: "timeout", Usage: "cancel and retry the job (Gojob::Timeout) when it runs longer than `SECONDS` (docs/heartbeats.md)"},
				&ucli.Float64Flag{Name: "heartbeat-timeout", Usage: "cancel and retry the job (Gojob::HeartbeatTimeout) when it goes `SECONDS` without a heartbeat"},
				&ucli.StringFlag{Name: "unique-until", Usage: "release the unique lock at the job's start or success (default success)"},
				&ucli.StringFlag{Name: "key", Usage: "push to the ordered queue --queue under ordering key `K`: K's jobs run one at a time in push order (gojob ordered work)"},
				&ucli.Float64Flag{Name: "score", Usage: "with --key: order by this score (a version) instead of push order"},
				&ucli.IntFlag{Name: "shards", Usage: "with --key: shard count of the queue if this push creates it (default 16)"},
				&ucli.StringFlag{Name: "batch", Usage: "add the job to the batch `BID` (gojob batch create) in the same step as its push"},
				&ucli.IntFlag{Name: "bulk", Value: pushBulkSize, Usage: "with -: lines per round trip to Redis"},
			}, durablePushFlags()...),
			Before: func(c *ucli.Context) error {
				if c.Args().First() == "-" {
					return pushLinesCheck(c)
				}
				if _, _, err := pushJobFromFlags(c); err != nil {
					return err
				}
				return checkBatchPush(c)
			},
			Action: withAPI(pushAction),
		},
		{Name: "stats", Usage: "dashboard numbers (processed, failed, enqueued, …)", Flags: []ucli.Flag{newRedisFlag(), newJSONFlag(),
			&ucli.IntFlag{Name: "days", Value: 7, Usage: "days of history"}}, Action: withAPI(statsAction)},
		{Name: "queues", Usage: "queues with size, latency, pause state and their jobs in the retry, schedule and dead sets", Flags: []ucli.Flag{newRedisFlag(), newJSONFlag()}, Action: withAPI(queuesAction)},
		queueCommand(),
		{Name: "retries", Usage: "list the retry set (next retry first)", Flags: setListFlags(), Before: checkPageFlags, Action: withAPI(setAction(contract.KeyRetry))},
		{Name: "scheduled", Usage: "list the schedule set (next due first)", Flags: setListFlags(), Before: checkPageFlags, Action: withAPI(setAction(contract.KeySchedule))},
		{Name: "dead", Usage: "list the dead set (newest first)", Flags: setListFlags(), Before: checkPageFlags, Action: withAPI(setAction(contract.KeyDead))},
		{Name: "retry", Usage: "push a job of the retry or dead set to its queue now (--all: every one, or every match)", ArgsUsage: "JID | --all [--from dead] [--queue Q] [--class C] [--jid J] [--error TEXT] [--search TEXT]", Flags: entryActionFlags("retry"), Action: withAPI(entryAction("retry"))},
		{Name: "kill", Usage: "move a job of the retry or schedule set to the dead set (--all: every one, or every match)", ArgsUsage: "JID | --all [--from schedule] [--queue Q] [--class C] [--jid J] [--error TEXT] [--search TEXT] [--yes]", Flags: entryActionFlags("kill"), Action: withAPI(entryAction("kill"))},
		{Name: "delete", Usage: "delete a job from the retry, schedule or dead set (--all --from SET: every one, or every match)", ArgsUsage: "JID | --all --from SET [--queue Q] [--class C] [--jid J] [--error TEXT] [--search TEXT] [--yes]", Flags: entryActionFlags("delete"), Action: withAPI(entryAction("delete"))},
		{Name: "processes", Usage: "live Sidekiq and gojob processes", Flags: []ucli.Flag{newRedisFlag(), newJSONFlag()}, Action: withAPI(processesAction)},
		{Name: "quiet", Usage: "quiet a process (stop fetching), as the Web UI's Quiet button", ArgsUsage: "IDENTITY|all", Flags: []ucli.Flag{newRedisFlag(), newJSONFlag()}, Action: withAPI(signalAction("TSTP"))},
		{Name: "stop", Usage: "stop a process gracefully, as the Web UI's Stop button", ArgsUsage: "IDENTITY|all", Flags: []ucli.Flag{newRedisFlag(), newJSONFlag()}, Action: withAPI(signalAction("TERM"))},
	}
}

func statsAction(ctx context.Context, e *adminEnv) error {
	st, err := e.api.Stats(ctx)
	if err != nil {
		return err
	}
	hist, err := e.api.History(ctx, e.c.Int("days"))
	if err != nil {
		return err
	}
	if e.json {
		// snake_case keys, as every --json output (the api's structs have
		// Go field names).
		type queueRow struct {
			Name string `json:"name"`
			Size int64  `json:"size"`
		}
		type dayRow struct {
			Date      string `json:"date"`
			Processed int64  `json:"processed"`
			Failed    int64  `json:"failed"`
		}
		queues := make([]queueRow, 0, len(st.Queues))
		for _, q := range st.Queues {
			queues = append(queues, queueRow{q.Name, q.Size})
		}
		days := make([]dayRow, 0, len(hist))
		for _, d := range hist {
			days = append(days, dayRow{d.Date, d.Processed, d.Failed})
		}
		return e.printJSON(map[string]any{
			"processed": st.Processed, "failed": st.Failed, "enqueued": st.Enqueued, "scheduled": st.Scheduled,
			"retries": st.Retries, "dead": st.Dead, "processes": st.Processes, "busy": st.Busy,
			"default_latency": st.DefaultQueueLatency.Seconds(), "queues": queues, "history": days,
		})
	}
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "processed\t%d\nfailed\t%d\nenqueued\t%d\nscheduled\t%d\nretries\t%d\ndead\t%d\nprocesses\t%d\nbusy\t%d\ndefault latency\t%s\n",
		st.Processed, st.Failed, st.Enqueued, st.Scheduled, st.Retries, st.Dead, st.Processes, st.Busy,
		st.DefaultQueueLatency.Round(time.Millisecond))
	tw.Flush()
	if len(hist) > 0 {
		fmt.Fprintln(e.out, "\nday         processed  failed")
		for _, d := range hist {
			fmt.Fprintf(e.out, "%s  %9d  %6d\n", d.Date, d.Processed, d.Failed)
		}
	}
	return nil
}

func queuesAction(ctx context.Context, e *adminEnv) error {
	// A queue known only from the retry, schedule and dead sets is listed
	// too.
	qs, counts, err := queuelist.List(ctx, e.api, e.pool)
	if err != nil {
		return err
	}
	type row struct {
		Name      string  `json:"name"`
		Size      int64   `json:"size"`
		Latency   float64 `json:"latency"`
		Paused    bool    `json:"paused"`
		Retries   int64   `json:"retries"`
		Scheduled int64   `json:"scheduled"`
		Dead      int64   `json:"dead"`
	}
	pausedNames, err := e.api.PausedQueues(ctx)
	if err != nil {
		return err
	}
	paused := map[string]bool{}
	for _, n := range pausedNames {
		paused[n] = true
	}
	rows := make([]row, 0, len(qs))
	for _, q := range qs {
		size, err := q.Size(ctx)
		if err != nil {
			return err
		}
		lat, err := q.Latency(ctx)
		if err != nil {
			return err
		}
		n := q.Name()
		rows = append(rows, row{n, size, lat.Seconds(), paused[n], counts[0][n], counts[1][n], counts[2][n]})
	}
	if e.json {
		return e.printJSON(rows)
	}
	if len(rows) == 0 {
		fmt.Fprintln(e.out, "no queues")
		return nil
	}
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tSIZE\tLATENCY\tRETRIES\tSCHEDULED\tDEAD\tSTATE")
	for _, r := range rows {
		state := "active"
		if r.Paused {
			state = "paused (gojob)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%s\n", r.Name, r.Size, time.Duration(r.Latency*float64(time.Second)).Round(time.Millisecond),
			r.Retries, r.Scheduled, r.Dead, state)
	}
	return tw.Flush()
}

func processesAction(ctx context.Context, e *adminEnv) error {
	list, err := e.api.Processes(ctx)
	if err != nil {
		return err
	}
	work, err := e.api.Running(ctx)
	if err != nil {
		return err
	}
	if e.json {
		type job struct {
			TID   string    `json:"tid"`
			JID   string    `json:"jid"`
			Class string    `json:"class"`
			Queue string    `json:"queue"`
			RunAt time.Time `json:"run_at"`
			// StartedAfter: see api.Work.
			StartedAfter *time.Time `json:"started_after,omitempty"`
			HeartbeatAt  *time.Time `json:"heartbeat_at"`
		}
		type row struct {
			Identity    string    `json:"identity"`
			Hostname    string    `json:"hostname"`
			PID         int64     `json:"pid"`
			Tag         string    `json:"tag"`
			Labels      []string  `json:"labels"`
			Queues      []string  `json:"queues"`
			Concurrency int64     `json:"concurrency"`
			Busy        int64     `json:"busy"`
			Quiet       bool      `json:"quiet"`
			Beat        time.Time `json:"beat"`
			StartedAt   time.Time `json:"started_at"`
			RSSKB       int64     `json:"rss_kb"`
			Version     string    `json:"version,omitempty"`
			Jobs        []job     `json:"jobs"`
		}
		rows := []row{}
		for _, p := range list {
			v, _ := p.Attributes.Get("version")
			vs, _ := v.Str()
			jobs := []job{}
			for _, w := range work {
				if w.Identity != p.Identity {
					continue
				}
				j := job{TID: w.TID, Queue: w.Queue, RunAt: w.RunAt.UTC()}
				if w.RunAt.IsZero() {
					after := w.StartedAfter.UTC()
					j.RunAt, j.StartedAfter = time.Time{}, &after
				}
				if w.Payload != nil {
					j.JID, j.Class = w.Payload.JID(), jobClass(w.Payload)
				}
				if !w.HeartbeatAt.IsZero() {
					hb := w.HeartbeatAt.UTC()
					j.HeartbeatAt = &hb
				}
				jobs = append(jobs, j)
			}
			rows = append(rows, row{p.Identity, p.Hostname, p.PID, p.Tag, p.Labels, p.Queues, p.Concurrency, p.Busy,
				p.Stopping, p.Beat.UTC(), p.StartedAt.UTC(), p.RSS, vs, jobs})
		}
		return e.printJSON(rows)
	}
	if len(list) == 0 {
		fmt.Fprintln(e.out, "no live processes")
		return nil
	}
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "IDENTITY\tTAG\tQUEUES\tBUSY\tSTATE\tRSS\tBEAT")
	live := map[string]bool{}
	for _, p := range list {
		live[p.Identity] = true
		state := "running"
		if p.Stopping {
			state = "quiet"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%.1f MB\t%s ago\n", p.Identity, p.Tag, strings.Join(p.Queues, ","),
			p.Busy, p.Concurrency, state, float64(p.RSS)/1024, time.Since(p.Beat).Round(time.Second))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(work) == 0 {
		return nil
	}
	// The running jobs, with each one's last heartbeat (docs/heartbeats.md).
	fmt.Fprintln(e.out)
	tw = tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "IDENTITY\tTID\tJID\tCLASS\tQUEUE\tRUNNING\tHEARTBEAT")
	for _, w := range work {
		if !live[w.Identity] {
			continue
		}
		jid, class := "?", "?"
		if w.Payload != nil {
			jid, class = w.Payload.JID(), jobClass(w.Payload)
		}
		hb := "-"
		if !w.HeartbeatAt.IsZero() {
			hb = time.Since(w.HeartbeatAt).Round(100*time.Millisecond).String() + " ago"
		}
		running := time.Since(w.RunAt).Round(time.Second).String()
		if w.RunAt.IsZero() {
			// Not in a work hash yet: it started after the last beat.
			running = "<" + time.Since(w.StartedAfter).Round(time.Second).String()
		}
		tid := w.TID
		if tid == "" {
			tid = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", w.Identity, tid, jid, class, w.Queue, running, hb)
	}
	return tw.Flush()
}

func signalAction(sig string) func(ctx context.Context, e *adminEnv) error {
	return func(ctx context.Context, e *adminEnv) error {
		id := e.c.Args().First()
		if id == "" {
			return ucli.Exit("IDENTITY (or all) is required; see gojob processes", exitUsage)
		}
		var ids []string
		embedded := 0
		if id == "all" {
			list, err := e.api.Processes(ctx)
			if err != nil {
				return err
			}
			for _, p := range list {
				if p.Embedded {
					embedded++
				} else {
					ids = append(ids, p.Identity)
				}
			}
		} else {
			ids = []string{id}
		}
		sent := []string{}
		all := id == "all"
		for _, id := range ids {
			err := procsignal.Send(ctx, e.pool, id, sig)
			if errors.Is(err, procsignal.ErrNotLive) && all {
				continue // it exited since the listing
			}
			if errors.Is(err, procsignal.ErrNotLive) {
				return ucli.Exit(fmt.Sprintf("%s: no live process %s (see gojob processes)", e.c.Command.Name, id), exitNotFound)
			}
			if err != nil {
				return err
			}
			sent = append(sent, id)
		}
		if e.json {
			return e.printJSON(map[string]any{"signal": sig, "identities": sent})
		}
		if len(sent) == 0 {
			// "all" with nothing to signal is not an error: nothing runs.
			msg := "no live process to " + e.c.Command.Name
			if embedded > 0 {
				msg += fmt.Sprintf(" (%d embedded, which take no signals)", embedded)
			}
			fmt.Fprintln(e.out, msg)
			return nil
		}
		for _, id := range sent {
			fmt.Fprintf(e.out, "sent %s to %s (it acts on it at its next heartbeat)\n", sig, id)
		}
		return nil
	}
}
