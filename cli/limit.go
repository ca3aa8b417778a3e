package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/limit"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// limitWorkFlags are gojob work's per-class limits.
func limitWorkFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringSliceFlag{Name: "limit", Usage: "run at most N jobs of CLASS at once across every gojob process sharing the limit: `CLASS=N`; repeat"},
		&ucli.DurationFlag{Name: "limit-delay", Value: time.Second, Usage: "a job over its --limit goes to the schedule set for this long plus up to a tenth of it and a second (jitter), holding no worker slot; not a failure"},
	}
}

// applyLimits installs a concurrent limiter ("class:CLASS") per --limit. A
// job that finds its limit full does not wait in its slot: it is
// rescheduled --limit-delay later (jittered) and its slot takes other
// work. The reschedule is not counted toward Enterprise's cap of 20
// (OverLimitError.NotCounted): a full limit says nothing about the job,
// which waits its turn however long the queue of its class.
func applyLimits(c *ucli.Context, srv *sidekiq.Server, pool *redis.Pool) error {
	delay := c.Duration("limit-delay")
	if delay <= 0 {
		return ucli.Exit(fmt.Sprintf("--limit-delay %s: want more than 0", delay), exitUsage)
	}
	for _, spec := range c.StringSlice("limit") {
		class, n, ok := strings.Cut(spec, "=")
		max, err := strconv.Atoi(n)
		if !ok || class == "" || err != nil || max < 1 {
			return ucli.Exit(fmt.Sprintf("--limit %q: want CLASS=N with N at least 1", spec), exitUsage)
		}
		name := "class:" + class
		l, err := limit.NewConcurrent(pool, name, max, &limit.Options{NoWait: true, RetryAfter: delay})
		if err != nil {
			return ucli.Exit(err.Error(), exitUsage)
		}
		mw := limit.ClassMiddleware(class, l)
		srv.Use(func(ctx context.Context, job *wire.Job, next func(context.Context) error) error {
			err := mw(ctx, job, next)
			var ol *sidekiq.OverLimitError
			if errors.As(err, &ol) && ol.Limiter == name {
				ol.NotCounted = true
			}
			return err
		})
	}
	return nil
}
