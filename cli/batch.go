package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/batch"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/wire"
)

// batchCommand is `gojob batch` (docs/batches.md).
func batchCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "batch",
		Usage: "create, seal and inspect batches of jobs with success and complete callbacks",
		Description: `A batch is created open; push its jobs with gojob push --batch BID, then seal
it: its callbacks fire once it is sealed and every job has succeeded (--on-success)
or every job has succeeded or died (--on-complete). A callback is a job of that
class with args [BID, "success"] or [BID, "complete"].`,
		Subcommands: []*ucli.Command{
			{
				Name:  "create",
				Usage: "create an open batch and print its id",
				Flags: []ucli.Flag{newRedisFlag(), newVersionFlag(), newJSONFlag(),
					&ucli.StringFlag{Name: "on-success", Usage: "`CLASS` of the job pushed once every job succeeded"},
					&ucli.StringFlag{Name: "on-complete", Usage: "`CLASS` of the job pushed once every job succeeded or died"},
					&ucli.StringFlag{Name: "description", Usage: "shown by status, list and the dashboard"},
					&ucli.StringFlag{Name: "callback-queue", Value: "default", Usage: "queue of the callback jobs"},
					&ucli.StringFlag{Name: "parent", Usage: "make the batch a member of the batch `BID`"},
				},
				Before: noArgs("gojob batch create"),
				Action: withAPI(batchCreateAction),
			},
			{Name: "seal", Before: oneArg("gojob batch seal", "BID"), Usage: "close the batch's list of jobs: its callbacks fire once its jobs have run", ArgsUsage: "BID",
				Flags: []ucli.Flag{newRedisFlag(), newJSONFlag()}, Action: withAPI(batchSealAction)},
			{Name: "status", Before: oneArg("gojob batch status", "BID"), Usage: "show a batch's counts and callbacks, and its pending and dead jobs with their errors", ArgsUsage: "BID",
				Flags: []ucli.Flag{newRedisFlag(), newJSONFlag(),
					&ucli.IntFlag{Name: "limit", Value: 25, Usage: "pending and dead jobs to list, of each (0: all)"}},
				Action: withAPI(batchStatusAction)},
			{Name: "list", Usage: "list batches, newest first",
				Flags: []ucli.Flag{newRedisFlag(), newJSONFlag(),
					&ucli.IntFlag{Name: "limit", Value: 25, Usage: "entries to show"},
					&ucli.IntFlag{Name: "offset", Usage: "entries to skip"}},
				Before: noArgs("gojob batch list"),
				Action: withAPI(batchListAction)},
		},
	}
}

func batchCreateAction(ctx context.Context, e *adminEnv) error {
	b, err := newBatches(e)
	if err != nil {
		return err
	}
	st, err := b.Create(ctx, &batch.CreateParams{Description: e.c.String("description"), OnSuccess: e.c.String("on-success"),
		OnComplete: e.c.String("on-complete"), CallbackQueue: e.c.String("callback-queue"), Parent: e.c.String("parent")})
	if err != nil {
		return batchError(err)
	}
	if e.json {
		return e.printJSON(st)
	}
	fmt.Fprintln(e.out, st.BID)
	return nil
}

func batchSealAction(ctx context.Context, e *adminEnv) error {
	bid := e.c.Args().First() // one, checked by Before
	b, err := newBatches(e)
	if err != nil {
		return err
	}
	if err := b.Seal(ctx, bid); err != nil {
		return batchError(err)
	}
	st, err := b.Status(ctx, bid)
	if err != nil {
		return batchError(err)
	}
	if e.json {
		return e.printJSON(st)
	}
	fmt.Fprintf(e.out, "sealed %s: %d jobs, %d pending\n", bid, st.Total, st.Pending)
	return nil
}

func batchStatusAction(ctx context.Context, e *adminEnv) error {
	bid := e.c.Args().First() // one, checked by Before
	b, err := newBatches(e)
	if err != nil {
		return err
	}
	st, err := b.Status(ctx, bid)
	if err == nil && st.Sealed && st.Pending > 0 {
		st, err = b.Reconcile(ctx, bid) // deaths its death handler missed
	}
	if err != nil {
		return batchError(err)
	}
	limit := e.c.Int("limit")
	if limit < 0 {
		return usageError("gojob batch status", fmt.Sprintf("--limit %d: want 0 (all) or more", limit))
	}
	pending, dead, nPending, nDead, err := b.Members(ctx, bid, limit)
	if err != nil {
		return batchError(err)
	}
	if e.json {
		return e.printJSON(struct {
			*batch.Status
			PendingJobs []*batch.Member `json:"pending_jobs"`
			DeadJobs    []*batch.Member `json:"dead_jobs"`
		}{st, orEmpty(pending), orEmpty(dead)})
	}
	w := e.out
	fmt.Fprintf(w, "bid:         %s\n", st.BID)
	if st.Description != "" {
		fmt.Fprintf(w, "description: %s\n", st.Description)
	}
	if st.Parent != "" {
		fmt.Fprintf(w, "parent:      %s\n", st.Parent)
	}
	fmt.Fprintf(w, "state:       %s\n", batchState(st))
	fmt.Fprintf(w, "jobs:        %d total, %d pending, %d succeeded, %d dead\n", st.Total, st.Pending, st.Succeeded, st.Dead)
	for _, cb := range []struct {
		name, class string
		at          *time.Time
	}{{"on success", st.OnSuccess, st.SuccessAt}, {"on complete", st.OnComplete, st.CompleteAt}} {
		if cb.class == "" {
			continue
		}
		when := "not yet"
		if cb.at != nil {
			when = "pushed " + cb.at.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%-12s %s (%s)\n", cb.name+":", cb.class, when)
	}
	printMembers(w, "dead", dead, nDead)
	printMembers(w, "pending", pending, nPending)
	return nil
}

func orEmpty(m []*batch.Member) []*batch.Member {
	if m == nil {
		return []*batch.Member{}
	}
	return m
}

// printMembers lists a batch's pending or dead members: where each job is
// and its last error.
func printMembers(w io.Writer, state string, list []*batch.Member, n int) {
	if n == 0 {
		return
	}
	more := ""
	if len(list) < n {
		more = fmt.Sprintf(", the first %d (--limit)", len(list))
	}
	fmt.Fprintf(w, "\n%s jobs (%d%s):\n", state, n, more)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JID\tCLASS\tQUEUE\tWHERE\tERROR")
	for _, m := range list {
		id := m.JID
		if m.Batch != "" {
			id = "batch " + m.Batch
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", id, m.Class, m.Queue, memberWhere(m), memberError(m))
	}
	tw.Flush()
}

// memberWhere says where a member's job is.
func memberWhere(m *batch.Member) string {
	switch {
	case m.Batch != "":
		return "child batch"
	case m.Set == contract.KeyRetry:
		s := "retry set, next " + textTime(*m.At)
		if m.RetryCount != nil {
			s = fmt.Sprintf("retry set (retried %d), next %s", *m.RetryCount, textTime(*m.At))
		}
		return s
	case m.Set == contract.KeySchedule:
		return "scheduled for " + textTime(*m.At)
	case m.Set == contract.KeyDead:
		return "dead set, died " + textTime(*m.At)
	case m.State == "dead":
		return "not in the dead set (retry false, deleted, retried or trimmed)"
	}
	return "queued or running"
}

func memberError(m *batch.Member) string {
	if m.ErrorClass == "" && m.ErrorMessage == "" {
		return ""
	}
	return m.ErrorClass + ": " + firstLine(m.ErrorMessage, 80)
}

// batchState names a batch's state for people.
func batchState(st *batch.Status) string {
	switch {
	case st.SuccessAt != nil:
		return "succeeded"
	case st.CompleteAt != nil:
		return "complete (with deaths)"
	case !st.Sealed:
		return "open (not sealed)"
	}
	return "running"
}

func batchListAction(ctx context.Context, e *adminEnv) error {
	b, err := newBatches(e)
	if err != nil {
		return err
	}
	list, err := b.List(ctx, e.c.Int("offset"), e.c.Int("limit"))
	if err != nil {
		return err
	}
	if e.json {
		if list == nil {
			list = []*batch.Status{}
		}
		return e.printJSON(list)
	}
	tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BID\tSTATE\tTOTAL\tPENDING\tSUCCEEDED\tDEAD\tCREATED\tDESCRIPTION")
	for _, st := range list {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", st.BID, batchState(st), st.Total, st.Pending, st.Succeeded, st.Dead,
			st.CreatedAt.UTC().Format(time.RFC3339), st.Description)
	}
	return tw.Flush()
}

// noArgs refuses arguments (and, for batch create, a bad callback class)
// before Redis is reached.
func noArgs(cmd string) ucli.BeforeFunc {
	return func(c *ucli.Context) error {
		name := cmd[len("gojob "):]
		if c.NArg() > 0 {
			return usageError(cmd, name+": takes no arguments")
		}
		for _, f := range []string{"on-success", "on-complete"} {
			if v := c.String(f); v != "" {
				if _, err := wire.NewJob(v); err != nil {
					return usageError(cmd, fmt.Sprintf("%s: --%s: %v", name, f, err))
				}
			}
		}
		return nil
	}
}
