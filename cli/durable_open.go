package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/durable"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/api"
)

// defaultDurableDB is the embedded store used when no database is given.
const defaultDurableDB = "sqlite:gojob-durable.db"

// durableDBFlags are the storage flags, named with prefix ("" for `gojob
// durable …`, "durable-" for `gojob work`).
func durableDBFlags(prefix string) []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringSliceFlag{Name: prefix + "db", Usage: "storage database `URL`, in order (postgres://… or sqlite:PATH); repeat. " +
			"Then the space-separated URLs of $DURABLE_JOB_SERVER_URLS, then the --" + prefix + "db-env variables. " +
			"Default: " + defaultDurableDB},
		&ucli.StringSliceFlag{Name: prefix + "db-env", Usage: "`NAME` of an environment variable holding a database URL (Amigo's server_env_vars); repeat. " +
			"Default: the space-separated names of $DURABLE_JOB_SERVER_ENV_VARS when set, else DATABASE_URL",
			Value: ucli.NewStringSlice("DATABASE_URL")},
		&ucli.StringFlag{Name: prefix + "schema", Value: "public", Usage: "PostgreSQL schema of the table", EnvVars: []string{"DURABLE_JOB_SCHEMA_NAME"}},
		&ucli.StringFlag{Name: prefix + "table", Value: "durable_jobs", Usage: "table name", EnvVars: []string{"DURABLE_JOB_TABLE_NAME"}},
	}
}

// The defaults of durable.Config.DefaultExtension (Amigo's
// heartbeat_extension) and durable.PollerConfig.Interval (webhookdb's
// poll), shown in the flags' help.
const (
	defaultDurableExtension    = 5 * time.Minute
	defaultDurablePollInterval = 3 * time.Minute
)

// durableClassFlags select the durable classes and their extensions.
func durableClassFlags(prefix string) []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringSliceFlag{Name: prefix + "class", Usage: "durable job `CLASS[=EXTENSION]` (e.g. Backfill=20m; * for every class); repeat"},
		&ucli.DurationFlag{Name: prefix + "extension", Value: defaultDurableExtension, Usage: "default heartbeat extension"},
	}
}

// durableURLs collects the storage URLs as Amigo does: explicit URLs, then
// the values of the named environment variables that are set. The names
// are the --db-env flags when given, else $DURABLE_JOB_SERVER_ENV_VARS when
// set (it replaces the default DATABASE_URL, as Appydays' env value
// replaces a setting's default), else DATABASE_URL.
func durableURLs(c *ucli.Context, prefix string) []string {
	var urls []string
	for _, u := range c.StringSlice(prefix + "db") {
		urls = append(urls, strings.Fields(u)...)
	}
	urls = append(urls, strings.Fields(os.Getenv("DURABLE_JOB_SERVER_URLS"))...)
	names := c.StringSlice(prefix + "db-env")
	if env, ok := os.LookupEnv("DURABLE_JOB_SERVER_ENV_VARS"); ok && !c.IsSet(prefix+"db-env") {
		names = strings.Fields(env)
	}
	for _, n := range names {
		if v := strings.TrimSpace(os.Getenv(n)); v != "" {
			urls = append(urls, v)
		}
	}
	if len(urls) == 0 {
		urls = []string{defaultDurableDB}
	}
	return urls
}

// durableClasses parses the --class values.
func durableClasses(c *ucli.Context, prefix string) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for _, spec := range c.StringSlice(prefix + "class") {
		class, ext, found := strings.Cut(spec, "=")
		class = strings.TrimSpace(class)
		if class == "" {
			return nil, ucli.Exit(fmt.Sprintf("--%sclass %q: want CLASS[=EXTENSION]", prefix, spec), exitUsage)
		}
		var d time.Duration
		if found {
			var err error
			if d, err = time.ParseDuration(strings.TrimSpace(ext)); err != nil || d <= 0 {
				return nil, ucli.Exit(fmt.Sprintf("--%sclass %q: bad extension (want a duration such as 5m)", prefix, spec), exitUsage)
			}
		}
		out[class] = d
	}
	return out, nil
}

func openDurable(c *ucli.Context, prefix string, classes map[string]time.Duration, log zerolog.Logger) (*durable.Durable, error) {
	d, err := durable.New(&durable.Config{
		URLs:             durableURLs(c, prefix),
		Schema:           c.String(prefix + "schema"),
		Table:            c.String(prefix + "table"),
		Classes:          classes,
		DefaultExtension: c.Duration(prefix + "extension"),
		// gojob work: a connection per slot at most (the group commit uses
		// two; heartbeats and unlocks the rest).
		MaxConns:    max(10, c.Int("concurrency")),
		BatchWindow: c.Duration("durable-batch-window"),
		Logger:      log,
		Adopt:       c.Bool(prefix + "adopt"),
	})
	if err != nil {
		return nil, ucli.Exit(err.Error(), exitUsage)
	}
	return d, nil
}

// durableWorkFlags are `gojob work`'s durable-job flags.
func durableWorkFlags() []ucli.Flag {
	flags := []ucli.Flag{
		&ucli.BoolFlag{Name: "durable", Usage: "keep a durable row per job of the --durable-class classes and reconcile lost jobs (see gojob durable)"},
	}
	flags = append(flags, durableDBFlags("durable-")...)
	flags = append(flags, durableClassFlags("durable-")...)
	return append(flags,
		&ucli.DurationFlag{Name: "durable-poll-interval", Value: defaultDurablePollInterval, Usage: "time between reconcile passes (one process at a time, elected through Redis)"},
		&ucli.BoolFlag{Name: "durable-no-poll", Usage: "do not reconcile in this process (also when $DISABLE_DURABLE_JOBS_POLL is set, to any value)"},
		&ucli.BoolFlag{Name: "durable-adopt", Usage: "write the row of a durable job that starts without one (pushed by a producer without gojob's or Amigo's client middleware) instead of running it unprotected"},
		&ucli.DurationFlag{Name: "durable-relay-lease", Value: 30 * time.Second, Usage: "how long this process holds the outbox rows it pushes before another may take them (see durable.Enqueue)"},
		&ucli.DurationFlag{Name: "durable-batch-window", Usage: "how long a row write may wait for others to share its statement while the database is idle (0: none; writes arriving during a write are grouped anyway)"},
	)
}

// durableNoPoll reports whether this process must not reconcile: the flag,
// or DISABLE_DURABLE_JOBS_POLL set to any value, as webhookdb's poller
// checks it (`if ENV["DISABLE_DURABLE_JOBS_POLL"]`). As a urfave EnvVars
// entry, a value such as "yes" stopped `gojob work` from starting.
func durableNoPoll(c *ucli.Context) bool {
	_, disabled := os.LookupEnv("DISABLE_DURABLE_JOBS_POLL")
	return disabled || c.Bool("durable-no-poll")
}

// setupDurable installs durable jobs on a server and its client when
// --durable is given: the tables are created when missing, the client
// middleware goes on client (and on the server's own client, for in-job
// pushes and the poller's re-pushes), the server middleware on srv, and the
// reconciler starts with leader election. Call it after every other client
// middleware was added (the durable one must be last). stop ends the
// reconciler, tries the row writes still waiting for a database once more
// (logging those left) and closes the databases; call it after the server
// stopped running jobs.
func setupDurable(c *ucli.Context, srv *sidekiq.Server, client *sidekiq.Client, log zerolog.Logger) (stop func(), err error) {
	noop := func() {}
	if !c.Bool("durable") {
		return noop, nil
	}
	classes, err := durableClasses(c, "durable-")
	if err != nil {
		return noop, err
	}
	if len(classes) == 0 {
		return noop, ucli.Exit("--durable needs at least one --durable-class CLASS[=EXTENSION] (or '*' for every class)", exitUsage)
	}
	d, err := openDurable(c, "durable-", classes, log)
	if err != nil {
		return noop, err
	}
	if res, err := d.Migrate(c.Context); err != nil {
		for _, m := range res {
			if m.Err != nil {
				log.Warn().Err(m.Err).Str("component", "durable").Str("database", m.Database).Msg("could not create the durable table; the database is skipped while it fails")
			}
		}
	}
	if client == nil {
		client = srv.Client()
	}
	client.Extend(d)
	srv.Extend(d) // and the server's own client: in-job pushes, the poller's re-pushes
	log.Info().Strs("databases", d.Databases()).Int("classes", len(classes)).Msg("durable jobs enabled")
	relay, err := durable.NewRelay(&durable.RelayConfig{Durable: d, Client: client, Lease: c.Duration("durable-relay-lease"), Logger: log})
	if err != nil {
		d.Close()
		return noop, ucli.Exit(err.Error(), exitUsage)
	}
	// The relay and the reconciler's poller run for the server's life
	// (sidekiq.Service); the rows' last writes settle after it stopped.
	stop = func() { closeDurable(d, log) }
	srv.Serve(relay)
	if durableNoPoll(c) {
		return stop, nil
	}
	admin, err := api.New(&api.Config{Pool: client.Pool(), Version: client.Version(), Client: client})
	if err != nil {
		d.Close()
		return noop, err
	}
	rec, err := durable.NewReconciler(&durable.ReconcilerConfig{Durable: d, API: admin})
	if err != nil {
		d.Close()
		return noop, err
	}
	poller, err := durable.NewPoller(&durable.PollerConfig{Reconciler: rec, Pool: client.Pool(), Identity: srv.Identity(),
		Interval: c.Duration("durable-poll-interval")})
	if err != nil {
		d.Close()
		return noop, ucli.Exit(err.Error(), exitUsage)
	}
	srv.Serve(poller)
	return stop, nil
}

// closeDurable tries the row writes still waiting for a database once
// more and closes the databases; Durable.Close logs each write left at
// error level.
func closeDurable(d *durable.Durable, log zerolog.Logger) {
	if err := d.Close(); err != nil {
		log.Error().Err(err).Str("component", "durable").Msg("durable rows left to settle by hand (see the lines above)")
	}
}

// durablePushFlags are `gojob push`'s durable-row flags: the database
// flags and environment of `gojob work --durable`.
func durablePushFlags() []ucli.Flag {
	return append([]ucli.Flag{
		&ucli.BoolFlag{Name: "durable", Usage: "write the job's durable row before the push, in the database of gojob work --durable (same --durable-db flags and environment)"},
		&ucli.DurationFlag{Name: "durable-extension", Value: defaultDurableExtension, Usage: "with --durable: the row's heartbeat extension"},
	}, durableDBFlags("durable-")...)
}

// openPushDurable opens the databases of `gojob push --durable` with the
// pushed classes durable, and makes sure one of them has the table: a
// durable push whose row no database can take fails before the push.
func openPushDurable(ctx context.Context, c *ucli.Context, log zerolog.Logger, classes ...string) (*durable.Durable, error) {
	durableClasses := map[string]time.Duration{}
	for _, class := range classes {
		durableClasses[class] = 0
	}
	d, err := openDurable(c, "durable-", durableClasses, log)
	if err != nil {
		return nil, err
	}
	res, err := d.Migrate(ctx)
	if err != nil {
		ok := false
		for _, m := range res {
			ok = ok || m.Err == nil
		}
		if !ok {
			d.Close()
			return nil, ucli.Exit("push --durable: no database can take the row, nothing pushed: "+err.Error(), exitFailed)
		}
	}
	return d, nil
}
