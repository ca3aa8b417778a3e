package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/limit"
	"github.com/gojob/gojob/sidekiq"
)

// limitWorkFlags are gojob work's per-class limits.
func limitWorkFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringSliceFlag{Name: "limit", Usage: "run at most N jobs of CLASS at once across every gojob process sharing the limit: `CLASS=N`; repeat"},
		&ucli.DurationFlag{Name: "limit-wait", Value: 5 * time.Second, Usage: "how long a job waits for a --limit slot before it is rescheduled (not a failure)"},
	}
}

// applyLimits installs a concurrent limiter ("class:CLASS") per --limit.
func applyLimits(c *ucli.Context, srv *sidekiq.Server, pool *redis.Pool) error {
	for _, spec := range c.StringSlice("limit") {
		class, n, ok := strings.Cut(spec, "=")
		max, err := strconv.Atoi(n)
		if !ok || class == "" || err != nil || max < 1 {
			return ucli.Exit(fmt.Sprintf("--limit %q: want CLASS=N with N at least 1", spec), exitUsage)
		}
		wait := c.Duration("limit-wait")
		l, err := limit.NewConcurrent(pool, "class:"+class, max, &limit.Options{WaitTimeout: wait, NoWait: wait == 0, RetryAfter: 5 * time.Second})
		if err != nil {
			return ucli.Exit(err.Error(), exitUsage)
		}
		srv.Use(limit.ClassMiddleware(class, l))
	}
	return nil
}
