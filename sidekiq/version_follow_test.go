package sidekiq

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/sidekiq/wire"
)

// The migration's end state: a following server started alone in a Redis
// that a 7.x cluster used (its metrics keys are still there) writes 7.3.10
// from the start (its running jobs under <id>:work, its version in info,
// the Metrics tab's keys), and switches at the next beat when a 6.4.1
// process joins: the jobs under <id>:workers, 6.4.1's info, no metrics.
func TestFollowingServerWritesWhatTheClusterReads(t *testing.T) {
	t.Parallel()
	b := newMetricsServer(t, ServerConfig{FollowVersion: true, ShutdownTimeout: 200 * time.Millisecond})
	now := b.clk.Now()
	keys, _ := contract.MetricsKeys(wire.Version7, now.Add(-3*time.Hour))
	_, err := b.conn.Do("HSET", keys[0], "RubyJob|p", 3)
	require.NoError(t, err)
	b.start(t)
	id := b.srv.Identity()
	require.Equal(t, contract.Format{Version: wire.Version7}, b.srv.format.Format())

	b.job(t, "HardJob", 5, "ok")
	b.waitProcessed(t, 1)
	b.push(t, "default", `{"retry":false,"queue":"default","class":"Slow","args":[],"jid":"slow00000000000000000001"}`)
	<-b.started
	b.beat(t)
	work, err := redis.StringMap(b.conn.Do("HGETALL", id+":work"))
	require.NoError(t, err)
	require.Len(t, work, 1)
	info, err := redis.String(b.conn.Do("HGET", id, "info"))
	require.NoError(t, err)
	require.Contains(t, info, `"version":"7.3.10"`)
	mine, _ := contract.MetricsKeys(wire.Version7, b.clk.Now())
	p, err := redis.String(b.conn.Do("HGET", mine[0], "HardJob|p"))
	require.NoError(t, err)
	require.Equal(t, "1", p)

	// A Ruby 6.4.1 process joins (its info has no version).
	_, err = b.conn.Do("SADD", contract.KeyProcesses, "ruby:9:bbbbbbbbbbbb")
	require.NoError(t, err)
	_, err = b.conn.Do("HSET", "ruby:9:bbbbbbbbbbbb", "info", `{"hostname":"ruby","identity":"ruby:9:bbbbbbbbbbbb"}`)
	require.NoError(t, err)
	b.beat(t)
	require.Equal(t, contract.Format{Version: wire.Version6}, b.srv.format.Format())
	n, err := redis.Int(b.conn.Do("EXISTS", id+":work"))
	require.NoError(t, err)
	require.Zero(t, n)
	work, err = redis.StringMap(b.conn.Do("HGETALL", id+":workers"))
	require.NoError(t, err)
	require.Len(t, work, 1, "6.4.1's Busy page reads :workers")
	info, _ = redis.String(b.conn.Do("HGET", id, "info"))
	require.NotContains(t, info, `"version"`)
	require.Equal(t, wire.Version6, b.srv.Client().Version(), "the server's client follows too")
}

// An explicit 8.x format over live 7.x processes is refused at Start
// (their Web UI fails on millisecond timestamps) unless forced.
func TestStartRefusesAVersionLiveProcessesCannotRead(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{Version: wire.Version8})
	_, err := b.conn.Do("SADD", contract.KeyProcesses, "ruby:9:bbbbbbbbbbbb")
	require.NoError(t, err)
	_, err = b.conn.Do("HSET", "ruby:9:bbbbbbbbbbbb", "info", `{"hostname":"ruby","version":"7.3.10"}`)
	require.NoError(t, err)
	err = b.srv.Start(context.Background())
	require.True(t, errors.Is(err, contract.ErrVersionUnreadable), "%v", err)
	require.ErrorContains(t, err, "ForceVersion")
	n, _ := redis.Int(b.conn.Do("SCARD", contract.KeyProcesses))
	require.Equal(t, 1, n, "nothing registered")

	forced := newTestServer(t, ServerConfig{Version: wire.Version8, ForceVersion: true})
	_, err = forced.conn.Do("SADD", contract.KeyProcesses, "ruby:9:bbbbbbbbbbbb")
	require.NoError(t, err)
	_, err = forced.conn.Do("HSET", "ruby:9:bbbbbbbbbbbb", "info", `{"hostname":"ruby","version":"7.3.10"}`)
	require.NoError(t, err)
	forced.start(t)
	require.Equal(t, wire.Version8, forced.srv.format.Version())
}

// Start checks the cluster once: its first beat does not check again.
func TestStartChecksTheClusterOnce(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{FollowVersion: true})
	b.start(t)
	require.Equal(t, 1, redistest.CommandCalls(t, b.conn, "zadd"), "one registration in gojob-processes")
	b.beat(t)
	require.Equal(t, 2, redistest.CommandCalls(t, b.conn, "zadd"), "each later beat checks")
}
