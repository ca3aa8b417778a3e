package bench

import (
	"context"
	"fmt"

	"github.com/gomodule/redigo/redis"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/internal/redact"
	"github.com/gojob/gojob/sidekiq"
)

// The exit codes bench returns, from gojob's table (cli/exitcodes.go,
// printed by `gojob --help`).
const (
	exitFailed      = 1 // a failure not listed below
	exitUsage       = 2 // a bad flag value
	exitUnreachable = 3 // cannot reach Redis
)

// newRedisFlag is the --redis flag every gojob command has, with the same
// name, alias, environment variable, default and help text.
func newRedisFlag() *ucli.StringFlag {
	return &ucli.StringFlag{
		Name:    "redis",
		Aliases: []string{"r"},
		Usage:   "Redis URL (redis://host:port/db, rediss://…, unix:///path, redis+sentinel://host:port[,host:port…]/MASTER[/DB])",
		EnvVars: []string{"REDIS_URL"},
		Value:   "redis://127.0.0.1:6379/0",
	}
}

func newJSONFlag() *ucli.BoolFlag {
	return &ucli.BoolFlag{Name: "json", Usage: "print JSON for scripts"}
}

// openPool opens a pool for the --redis flag and checks it answers; the
// errors never show the URL's password.
func openPool(ctx context.Context, url string, maxActive int) (*redis.Pool, error) {
	pool, err := sidekiq.NewPool(url, &sidekiq.PoolOptions{MaxActive: maxActive})
	if err != nil {
		return nil, ucli.Exit(redact.String(err.Error(), url), exitUsage)
	}
	conn, err := pool.GetContext(ctx)
	if err == nil {
		_, err = redis.DoContext(conn, ctx, "PING")
		conn.Close()
	}
	if err != nil {
		pool.Close()
		return nil, ucli.Exit(redact.String(fmt.Sprintf("cannot reach Redis at %s: %v", redact.URL(url), err), url), exitUnreachable)
	}
	return pool, nil
}
