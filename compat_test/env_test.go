// Package compat_test runs real Ruby Sidekiq 6.4.1 (Debian's ruby-sidekiq)
// against gojob on a private redis-server, and checks that each side reads
// and writes exactly what the other expects.
package compat_test

import (
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/rubytest"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// env is one compat test's world: a private redis-server reachable over TCP
// (for Ruby) and a gojob client on it writing the 6.4 format.
type env struct {
	srv    *redistest.Server
	pool   *redis.Pool
	client *sidekiq.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("compat tests run Ruby; skipped with -short (make test runs them)")
	}
	rubytest.Require(t)
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := srv.Pool(t)
	c, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool, Version: wire.Version6})
	require.NoError(t, err)
	return &env{srv: srv, pool: pool, client: c}
}

// ruby runs a Ruby script against the env's Redis and returns its stdout.
func (e *env) ruby(t *testing.T, script string) string {
	t.Helper()
	return rubytest.Run(t, e.srv.URL(), script)
}

// do runs one Redis command.
func (e *env) do(t *testing.T, cmd string, args ...any) any {
	t.Helper()
	c := e.pool.Get()
	defer c.Close()
	v, err := c.Do(cmd, args...)
	require.NoError(t, err)
	return v
}
