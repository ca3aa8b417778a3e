package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/cron"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq"
)

// cronLayoutFlags select the sidekiq-cron key layout.
func cronLayoutFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "cron-layout", Value: "auto", Usage: "sidekiq-cron key layout: v2 (cron_jobs:NAMESPACE), v1 (cron_jobs, the gem before 2.0) or auto (the layout of the schedule in Redis; on an empty one, v1 beside Sidekiq 6, v2 beside 7 and 8)"},
		&ucli.StringFlag{Name: "cron-namespace", Value: "default", Usage: "sidekiq-cron 2.x namespace"},
	}
}

// cronLayout resolves --cron-layout (docs/cron.md#layouts): auto picks v1
// when the 1.x set has jobs and the 2.x namespace's set has none, v2 when
// the 2.x set has jobs; on a Redis with neither, the layout of the gem
// version recommended beside the Sidekiq version in use, or v2 when no
// version is known.
func cronLayout(ctx context.Context, c *ucli.Context, pool *redis.Pool) (cron.Layout, error) {
	l, _, err := cronLayoutChoice(ctx, c, pool)
	return l, err
}

// cronLayoutChoice is cronLayout; unknown says that auto found no schedule
// and no Sidekiq version to choose by, and fell back to v2.
func cronLayoutChoice(ctx context.Context, c *ucli.Context, pool *redis.Pool) (l cron.Layout, unknown bool, err error) {
	l = cron.Layout{Namespace: c.String("cron-namespace")}
	switch c.String("cron-layout") {
	case "v2":
		return l, false, nil
	case "v1":
		l.V1 = true
		return l, false, nil
	case "auto", "":
	default:
		return l, false, ucli.Exit(fmt.Sprintf("--cron-layout %q: want auto, v1 or v2", c.String("cron-layout")), exitUsage)
	}
	conn, err := pool.GetContext(ctx)
	if err != nil {
		return l, false, err
	}
	defer conn.Close()
	conn.Send("SCARD", contract.CronSetKey(true, ""))
	conn.Send("SCARD", contract.CronSetKey(false, l.Namespace))
	n, err := redis.Ints(redis.DoContext(conn, ctx, ""))
	if err != nil {
		return l, false, err
	}
	if n[0] > 0 || n[1] > 0 {
		l.V1 = n[0] > 0 && n[1] == 0
		return l, false, nil
	}
	d, err := contract.DecideFormat(ctx, pool, time.Now())
	if err != nil {
		return l, false, err
	}
	switch {
	case d.Format.ForAll || d.Source == contract.SourceNone || d.Source == contract.SourceAged:
		return l, true, nil
	case d.Format.Version.Major <= 6:
		// sidekiq-cron 1.x beside Sidekiq 6 (Debian's 1.8.0 beside
		// 6.4.1); a 2.x gem moves 1.x jobs into its namespace at start.
		l.V1 = true
	}
	return l, false, nil
}

// cronLayoutNote says which layout a first schedule was written in when
// nothing showed one: the 2.x layout that cron list and the dashboard
// report on such a Redis.
func cronLayoutNote(cmd string) string {
	return cmd + ": Redis holds no periodic job and no Sidekiq version is known: wrote the sidekiq-cron 2.x layout " +
		"(Sidekiq 7 and 8); for sidekiq-cron before 2.0 (Sidekiq 6, such as Debian's 1.8.0) pass --cron-layout v1 " +
		"(docs/cron.md#layouts)"
}

// startCron loads --cron FILE (if given) and, with it or --cron-serve,
// runs a scheduler until the returned stop is called.
func serveCron(c *ucli.Context, srv *sidekiq.Server, log zerolog.Logger) error {
	file := c.String("cron")
	if file == "" && !c.Bool("cron-serve") {
		return nil
	}
	client := srv.Client()
	l, unknown, err := cronLayoutChoice(c.Context, c, client.Pool())
	if err != nil {
		return err
	}
	if unknown && file != "" {
		log.Warn().Str("component", "cron").Str("layout", l.String()).
			Msg("Redis holds no periodic job and no Sidekiq version is known: writing the sidekiq-cron 2.x layout, which sidekiq-cron 1.x (beside Sidekiq 6) does not read; pass --cron-layout v1 or v2 to choose")
	}
	st := &cron.Store{Client: client, Layout: l}
	if file != "" {
		jobs, err := cron.LoadFile(file)
		if err != nil {
			return ucli.Exit(err.Error(), exitUsage)
		}
		if err := st.Sync(c.Context, jobs); err != nil {
			return fmt.Errorf("cron: loading %s: %w", file, err)
		}
		log.Info().Str("component", "cron").Str("file", file).Int("jobs", len(jobs)).Str("layout", l.String()).Msg("cron schedule loaded")
	}
	s := &cron.Scheduler{Store: st, Interval: c.Duration("cron-poll-interval"), Logger: log}
	srv.Serve(sidekiq.Loop(s.Run))
	return nil
}

// cronWorkFlags are gojob work's cron flags.
func cronWorkFlags() []ucli.Flag {
	return append([]ucli.Flag{
		&ucli.StringFlag{Name: "cron", Usage: "load periodic jobs from `FILE` (sidekiq-cron's schedule.yml format) and push their ticks"},
		&ucli.BoolFlag{Name: "cron-serve", Usage: "push the ticks of the periodic jobs in Redis (as a sidekiq-cron poller does) without a file"},
		&ucli.DurationFlag{Name: "cron-poll-interval", Value: 30 * time.Second, Usage: "average time between cron passes (sidekiq-cron's cron_poll_interval)"},
	}, cronLayoutFlags()...)
}
