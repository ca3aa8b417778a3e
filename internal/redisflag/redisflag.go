// Package redisflag is the --redis flag of gojob's commands and the pool
// it opens, shared by the cli package and the bench of cmd/gojob, so the
// two read the flag and report an unreachable Redis the same way.
package redisflag

import (
	"context"
	"fmt"

	"github.com/gomodule/redigo/redis"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/internal/redact"
	"github.com/gojob/gojob/sidekiq"
)

// Flag is the --redis flag every gojob command has, with its alias,
// environment variable, default and help text.
func Flag() *ucli.StringFlag {
	return &ucli.StringFlag{
		Name:    "redis",
		Aliases: []string{"r"},
		Usage:   "Redis URL (redis://host:port/db, rediss://…, unix:///path, redis+sentinel://host:port[,host:port…]/MASTER[/DB])",
		EnvVars: []string{"REDIS_URL"},
		Value:   "redis://127.0.0.1:6379/0",
	}
}

// Open opens a pool for url and checks that it answers. A URL that does
// not parse exits with usage, a Redis that does not answer with
// unreachable (the caller's exit codes); the errors never show the URL's
// password.
func Open(ctx context.Context, url string, maxActive, usage, unreachable int) (*redis.Pool, error) {
	pool, err := sidekiq.NewPool(url)
	if err != nil {
		return nil, ucli.Exit(redact.String(err.Error(), url), usage)
	}
	pool.MaxActive, pool.Wait = maxActive, maxActive > 0
	conn, err := pool.GetContext(ctx)
	if err == nil {
		_, err = redis.DoContext(conn, ctx, "PING")
		conn.Close()
	}
	if err != nil {
		pool.Close()
		return nil, ucli.Exit(redact.String(fmt.Sprintf("cannot reach Redis at %s: %v", redact.URL(url), err), url), unreachable)
	}
	return pool, nil
}
