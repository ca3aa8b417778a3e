package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/durable"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/api"
)

func durableCommand(o *options) *ucli.Command {
	_ = o
	return &ucli.Command{
		Name:  "durable",
		Usage: "durable jobs (Amigo::DurableJob's table): create the tables, reconcile lost jobs once, show the rows",
		Description: `Durable jobs keep a row per job in PostgreSQL (Amigo::DurableJob's table,
shared with Ruby processes that use it) or in a SQLite file, so that a job
Redis loses (a killed worker, a crash, a manual deletion) is found by the
reconciler and moved to the dead set with durable_killed_at, where it can be
retried. Run workers with gojob work --durable --durable-class CLASS …; the
reconciler runs inside them (one leader at a time) or once with
gojob durable poll.`,
		Subcommands: []*ucli.Command{
			{
				Name:  "migrate",
				Usage: "create the table in every database, or add missing_at to an old one",
				Flags: append(durableDBFlags(""), newJSONFlag()),
				Action: withDurable(func(c *ucli.Context, d *durable.Durable) error {
					res, err := d.Migrate(c.Context)
					printMigrate(c.App.Writer, res, c.Bool("json"))
					if err != nil {
						return ucli.Exit("", exitFailed)
					}
					return nil
				}),
			},
			{
				Name:  "poll",
				Usage: "reconcile once: check every overdue row against Redis, kill lost jobs into the dead set",
				Flags: append(append(append([]ucli.Flag{newRedisFlag(), newVersionFlag(), newJSONFlag(),
					&ucli.IntFlag{Name: "page-size", Value: 500, Usage: "overdue rows read at a time"},
				}, durableDBFlags("")...), durableClassFlags("")...),
					&ucli.StringFlag{Name: "log-level", Value: "warn", Usage: "debug, info, warn, error"}),
				Action: func(c *ucli.Context) error {
					log := newLogger(c.App.ErrWriter, false, c.String("log-level"))
					classes, err := durableClasses(c, "")
					if err != nil {
						return err
					}
					d, err := openDurable(c, "", classes, log)
					if err != nil {
						return err
					}
					defer d.Close()
					pool, v, err := openRedis(c, 4, log)
					if err != nil {
						return err
					}
					defer pool.Close()
					admin, err := api.New(&api.Config{Pool: pool, Version: v})
					if err != nil {
						return err
					}
					r, err := durable.NewReconciler(&durable.ReconcilerConfig{Durable: d, API: admin, PageSize: c.Int("page-size")})
					if err != nil {
						return ucli.Exit(err.Error(), exitUsage)
					}
					res, err := r.RunOnce(c.Context)
					if res != nil {
						printReconcile(c.App.Writer, res, c.Bool("json"))
					}
					if err != nil {
						return err
					}
					return nil
				},
			},
			{
				Name:  "relay",
				Usage: "push the jobs written with durable.Enqueue in committed transactions (the outbox), until stopped",
				Description: `gojob work --durable relays the outbox too; run this where no worker
uses the databases. Relays share the rows: each is pushed once.`,
				Flags: append(append([]ucli.Flag{newRedisFlag(), newVersionFlag(),
					&ucli.DurationFlag{Name: "lease", Value: 30 * time.Second, Usage: "how long this relay holds the rows it takes before another may take them"},
					&ucli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn, error"},
				}, durableDBFlags("")...), &ucli.DurationFlag{Name: "extension", Value: defaultDurableExtension, Usage: "default heartbeat extension"}),
				Action: func(c *ucli.Context) error {
					log := newLogger(c.App.ErrWriter, false, c.String("log-level"))
					d, err := openDurable(c, "", nil, log)
					if err != nil {
						return err
					}
					defer d.Close()
					if _, err := d.Migrate(c.Context); err != nil {
						log.Warn().Err(err).Str("component", "durable").Msg("could not create the durable table")
					}
					return withRedis(c, func(e *cmdEnv) error {
						client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: e.pool, Version: e.version})
						if err != nil {
							return err
						}
						stopTracing, err := setupTracing(c.Context, log, client)
						if err != nil {
							return err
						}
						defer stopTracing()
						relay, err := durable.NewRelay(&durable.RelayConfig{Durable: d, Client: client, Lease: c.Duration("lease"), Logger: log})
						if err != nil {
							return ucli.Exit(err.Error(), exitUsage)
						}
						if err := relay.Start(c.Context); err != nil {
							return err
						}
						log.Info().Strs("databases", d.Databases()).Msg("relaying the outbox")
						ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGINT)
						defer stop()
						<-ctx.Done()
						sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						return relay.Stop(sctx)
					})
				},
			},
			{
				Name:  "status",
				Usage: "rows per database by state: locked, waiting, missing, overdue",
				Flags: append(durableDBFlags(""), newJSONFlag()),
				Action: withDurable(func(c *ucli.Context, d *durable.Durable) error {
					st, err := d.Status(c.Context)
					if err != nil {
						return err
					}
					failed := printStatus(c.App.Writer, st, c.Bool("json"))
					if !failed {
						return nil
					}
					// Not migrated yet (every failure is a missing table):
					// "not found", with the command that creates it.
					for _, d := range st.Databases {
						if d.Err != nil && !errors.Is(d.Err, durable.ErrNoTable) {
							return ucli.Exit("", exitFailed)
						}
					}
					return ucli.Exit("no durable_jobs table: run gojob durable migrate with the same --db first", exitNotFound)
				}),
			},
		},
	}
}

// withDurable is the action of a command on the --db databases alone: it
// opens them and runs f.
func withDurable(f func(c *ucli.Context, d *durable.Durable) error) ucli.ActionFunc {
	return func(c *ucli.Context) error {
		d, err := openDurable(c, "", nil, zerolog.Nop())
		if err != nil {
			return err
		}
		defer d.Close()
		return f(c, d)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func printMigrate(w io.Writer, res []durable.DatabaseMigration, asJSON bool) {
	if asJSON {
		type row struct {
			Database       string `json:"database"`
			Created        bool   `json:"created"`
			AddedMissingAt bool   `json:"added_missing_at"`
			Error          string `json:"error,omitempty"`
		}
		rows := []row{}
		for _, m := range res {
			rows = append(rows, row{m.Database, m.Created, m.AddedMissingAt, errString(m.Err)})
		}
		printJSONTo(w, rows)
		return
	}
	for _, m := range res {
		switch {
		case m.Err != nil:
			fmt.Fprintf(w, "%s: error: %v\n", m.Database, m.Err)
		case m.Created:
			fmt.Fprintf(w, "%s: created the table\n", m.Database)
		case m.AddedMissingAt:
			fmt.Fprintf(w, "%s: added the missing_at column\n", m.Database)
		default:
			fmt.Fprintf(w, "%s: up to date\n", m.Database)
		}
	}
}

func printReconcile(w io.Writer, res *durable.ReconcileResult, asJSON bool) {
	if asJSON {
		type db struct {
			durable.DatabaseReconcile
			Error string `json:"error,omitempty"`
		}
		dbs := []db{}
		for _, d := range res.Databases {
			dbs = append(dbs, db{d, errString(d.Err)})
		}
		var errs []string
		for _, e := range res.Errors {
			errs = append(errs, e.Error())
		}
		killed := res.KilledJIDs
		if killed == nil {
			killed = []string{}
		}
		printJSONTo(w, map[string]any{"totals": res.ReconcileCounts, "databases": dbs, "killed_jids": killed, "errors": errs})
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DATABASE\tCHECKED\tQUEUED\tRUNNING\tRETRYING\tSCHEDULED\tDEAD\tMISSING\tKILLED\tCHANGED\tFAILED")
	for _, d := range res.Databases {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", d.Database, d.Checked, d.Queued, d.Running, d.Retrying,
			d.Scheduled, d.AlreadyDead, d.Marked, d.Killed, d.Changed, d.Failed)
	}
	tw.Flush()
	for _, d := range res.Databases {
		if d.Err != nil {
			fmt.Fprintf(w, "%s: error: %v\n", d.Database, d.Err)
		}
	}
	for _, e := range res.Errors {
		fmt.Fprintln(w, "error:", e)
	}
	for _, jid := range res.KilledJIDs {
		fmt.Fprintln(w, "moved to the dead set:", jid)
	}
}

// printStatus prints the status and reports whether a database failed.
func printStatus(w io.Writer, st *durable.Status, asJSON bool) bool {
	failed := false
	for _, d := range st.Databases {
		failed = failed || d.Err != nil
	}
	if asJSON {
		type db struct {
			durable.DatabaseStatus
			Error string `json:"error,omitempty"`
		}
		dbs := []db{}
		for _, d := range st.Databases {
			dbs = append(dbs, db{d, errString(d.Err)})
		}
		printJSONTo(w, map[string]any{"now": st.Now.UTC(), "databases": dbs})
		return failed
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DATABASE\tKIND\tTOTAL\tLOCKED\tWAITING\tMISSING\tOVERDUE\tTO PUSH\tNEXT DUE")
	for _, d := range st.Databases {
		if d.Err != nil {
			fmt.Fprintf(tw, "%s\t%s\terror: %v\n", d.Database, d.Kind, d.Err)
			continue
		}
		next := "-"
		if d.NextDue != nil {
			next = textTime(*d.NextDue)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", d.Database, d.Kind, d.Total, d.Locked, d.Waiting, d.Missing, d.Overdue, d.ToPush, next)
	}
	tw.Flush()
	return failed
}

func printJSONTo(w io.Writer, v any) {
	_ = (&cmdEnv{out: w}).printJSON(v)
}
