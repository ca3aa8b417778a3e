package cli

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/cron"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// withCron runs f with a store of the chosen layout; writes says f writes
// a job, which notes on stderr the layout auto fell back to.
func withCron(writes bool, f func(ctx context.Context, e *cmdEnv, st *cron.Store) error) ucli.ActionFunc {
	return func(c *ucli.Context) error {
		return withRedis(c, func(e *cmdEnv) error {
			client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: e.pool, Version: e.version})
			if err != nil {
				return err
			}
			l, unknown, err := cronLayoutChoice(c.Context, c, e.pool)
			if err != nil {
				return err
			}
			err = f(c.Context, e, &cron.Store{Client: client, Layout: l})
			if err == nil && unknown && writes {
				fmt.Fprintln(c.App.ErrWriter, "note: "+cronLayoutNote("gojob cron "+c.Command.Name))
			}
			if errors.Is(err, cron.ErrNotFound) {
				return ucli.Exit(err.Error(), exitNotFound)
			}
			return err
		})
	}
}

func cronCommand() *ucli.Command {
	flags := func(extra ...ucli.Flag) []ucli.Flag {
		return append(append([]ucli.Flag{newRedisFlag(), newJSONFlag()}, cronLayoutFlags()...), extra...)
	}
	one := func(name, usage string, f func(ctx context.Context, e *cmdEnv, st *cron.Store, job string) error) *ucli.Command {
		return &ucli.Command{Name: name, Usage: usage, ArgsUsage: "NAME", Flags: flags(),
			Action: withCron(false, func(ctx context.Context, e *cmdEnv, st *cron.Store) error {
				if e.c.NArg() != 1 {
					return ucli.Exit(name+": one job NAME is required", exitUsage)
				}
				return f(ctx, e, st, e.c.Args().First())
			})}
	}
	return &ucli.Command{
		Name:  "cron",
		Usage: "periodic jobs, shared with Ruby's sidekiq-cron gem (its Web UI tab shows them)",
		Description: `Reads and writes the schedule in sidekiq-cron's Redis layout (docs/cron.md).
Processes started with gojob work --cron FILE (or --cron-serve) push the due
ticks, each once across gojob and Ruby sidekiq-cron processes.`,
		Subcommands: []*ucli.Command{
			{Name: "list", Usage: "list periodic jobs", Flags: flags(), Action: withCron(false, cronList)},
			{Name: "add", Usage: "add or replace a periodic job", ArgsUsage: "NAME",
				Flags: flags(
					&ucli.StringFlag{Name: "cron", Usage: "schedule: 5 or 6 fields, @hourly…, optional trailing zone (required)"},
					&ucli.StringFlag{Name: "class", Usage: "job class (required)"},
					&ucli.StringFlag{Name: "queue", Aliases: []string{"q"}, Value: "default", Usage: "queue"},
					&ucli.StringFlag{Name: "args", Value: "[]", Usage: "arguments, a JSON array"},
					&ucli.StringFlag{Name: "description", Usage: "description shown in the Web UI"},
					&ucli.BoolFlag{Name: "disabled", Usage: "add it disabled"},
				),
				Before: func(c *ucli.Context) error {
					// Checked here rather than with Required, which urfave/cli
					// reports as a plain error (exit 1), before Redis is reached.
					for _, f := range []string{"cron", "class"} {
						if c.String(f) == "" {
							return usageError("gojob cron add", "--"+f+" is required")
						}
					}
					return nil
				},
				Action: withCron(true, cronAdd)},
			one("enable", "enable a periodic job", func(ctx context.Context, e *cmdEnv, st *cron.Store, n string) error {
				return st.SetEnabled(ctx, n, true)
			}),
			one("disable", "disable a periodic job", func(ctx context.Context, e *cmdEnv, st *cron.Store, n string) error {
				return st.SetEnabled(ctx, n, false)
			}),
			one("run-now", "push a periodic job now (its schedule is unchanged)", func(ctx context.Context, e *cmdEnv, st *cron.Store, n string) error {
				jid, err := st.RunNow(ctx, n)
				if err != nil {
					return err
				}
				if e.json {
					return e.printJSON(map[string]string{"jid": jid})
				}
				fmt.Fprintln(e.out, jid)
				return nil
			}),
			one("delete", "delete a periodic job and its history", func(ctx context.Context, e *cmdEnv, st *cron.Store, n string) error {
				return st.Delete(ctx, n)
			}),
		},
	}
}

func cronAdd(ctx context.Context, e *cmdEnv, st *cron.Store) error {
	c := e.c
	if c.NArg() != 1 {
		return ucli.Exit("add: one job NAME is required", exitUsage)
	}
	name := c.Args().First()
	var args []any
	if s := c.String("args"); s != "" {
		v, err := rubyjson.Parse([]byte(s))
		vals, isArray := v.Array()
		if err != nil || !isArray {
			return ucli.Exit(fmt.Sprintf("cron job %s: args must be a JSON array, got %q", name, s), exitUsage)
		}
		for _, a := range vals {
			args = append(args, a)
		}
	}
	j, err := cron.NewJob(name, c.String("cron"), c.String("class"), c.String("queue"), args...)
	if err != nil {
		return ucli.Exit(err.Error(), exitUsage)
	}
	j.Description = c.String("description")
	j.Enabled = !c.Bool("disabled")
	return st.Save(ctx, j)
}

func cronList(ctx context.Context, e *cmdEnv, st *cron.Store) error {
	jobs, err := st.List(ctx)
	if err != nil {
		return err
	}
	if e.json {
		out := []map[string]any{}
		for _, j := range jobs {
			m := map[string]any{"name": j.Name, "cron": j.Cron, "class": j.Class, "queue": j.Queue(),
				"status": cronStatus(j), "source": j.Source, "description": j.Description, "args": j.Args}
			if !j.LastEnqueue.IsZero() {
				m["last_enqueue_time"] = j.LastEnqueue.UTC().Format(time.RFC3339)
			}
			out = append(out, m)
		}
		return e.printJSON(out)
	}
	if len(jobs) == 0 {
		fmt.Fprintf(e.out, "no periodic jobs (%s)\n", st.Layout)
		return nil
	}
	tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCRON\tCLASS\tQUEUE\tSTATUS\tLAST ENQUEUED")
	for _, j := range jobs {
		last := "never"
		if !j.LastEnqueue.IsZero() {
			last = textTime(j.LastEnqueue)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", j.Name, j.Cron, j.Class, j.Queue(), cronStatus(j), last)
	}
	return tw.Flush()
}

// cronStatus is the job's status as the gem's hash stores it.
func cronStatus(j *cron.Job) string {
	if j.Enabled {
		return "enabled"
	}
	return "disabled"
}
