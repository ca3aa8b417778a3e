package fetch

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/testlog"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/wire"
)

// A Redis that restarts empty while a job runs: the fetch sees the new
// run_id on its next connection, logs once that Redis lost its data (not a
// line per job whose list is gone, nor that the process was stopped for a
// minute), and a job pushed then runs.
func TestReliableNoticesARestartThatLostTheData(t *testing.T) {
	t.Parallel()
	logs := testlog.New(t)
	b := reliableBundle(t, nil, func(c *Config) {
		c.Concurrency = 2
		c.Logger = logs.Logger()
	})
	release := make(chan struct{})
	var f *reliableFetch
	var finished atomic.Int32
	b.hook = func(u Unit) {
		if string(u.Raw) == "long" {
			<-release
		}
		f.Finish(u, nil)
		finished.Add(1)
	}
	f = newReliable(t, b)
	b.start(t, f)
	t.Cleanup(f.Close)
	b.push(t, "default", "long")
	wait.For(t, "the long job to start", func() bool { return len(b.inProgress(t)) == 1 })

	b.rs.Restart(t)
	c, err := b.rs.Dial()
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Do("LPUSH", contract.QueueKey("default"), "after")
	require.NoError(t, err)
	wait.For(t, "the job pushed after the restart", func() bool { return b.processed() == 2 })
	wait.For(t, "the log", func() bool { return logs.Count("", "redis lost its data") == 1 })
	close(release)
	wait.For(t, "the long job to finish", func() bool { return finished.Load() == 2 && f.acker.waitingSince() == 0 })
	b.quietNow()
	f.Wait() // the acknowledgements are sent
	require.Zero(t, logs.Count("", "no longer in this process's in-progress list"))
	require.Zero(t, logs.Count("", "stopped for a minute"))
	require.Equal(t, 1, logs.Count("", "redis lost its data"))
}

// A heartbeat renewal that finds the keys gone (this process was taken for
// dead, or Redis lost them) writes them again: it ends the epoch, and
// moves go on at once, into lists of fresh identities, instead of waiting
// for the next renewal.
func TestReliableRenewalThatFindsHeartbeatsGoneKeepsTaking(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, func(c *Config) {
		c.Order = NewOrder([]wire.QueueWeight{{Name: "default"}}, wire.Version7)
	})
	var f *reliableFetch
	b.finishWith(func() Fetcher { return f })
	f = newReliable(t, b)
	halt(f.life)
	b.start(t, f)
	b.push(t, "default", "j1")
	wait.For(t, "the first job", func() bool { return b.processed() == 1 })
	hb := b.keys(t, "reliable-fetcher-heartbeat-*")
	require.NotEmpty(t, hb)
	for _, k := range hb {
		_, err := b.conn.Do("DEL", k)
		require.NoError(t, err)
	}
	// The last confirmation is older than positionFresh.
	f.ids.confirmed.Store(time.Now().Add(-time.Minute).UnixNano())
	f.ids.age()
	require.False(t, f.ids.fresh())
	epoch := f.ids.epoch.Load()
	f.life.beat()
	require.True(t, f.ids.fresh(), "the renewal wrote the keys again")
	require.Greater(t, f.ids.epoch.Load(), epoch, "no position is trusted")
	for _, k := range hb {
		n, err := redis.Int(b.conn.Do("EXISTS", k))
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}
	b.push(t, "default", "j2")
	wait.For(t, "the next job", func() bool { return b.processed() == 2 })
}

// A job in one of this process's own lists whose registration was never
// confirmed (a move whose reply a failover cut off) is given back at a
// clean stop: the final sweep reads every list a live identity may have,
// one per queue, not only the registered ones.
func TestReliableStopGivesBackAJobInAnUnregisteredOwnList(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, func(c *Config) {
		c.Concurrency = 1
		c.Order = NewOrder([]wire.QueueWeight{{Name: "a"}, {Name: "b"}}, wire.Version7)
	})
	var f *reliableFetch
	b.finishWith(func() Fetcher { return f })
	f = newReliable(t, b)
	f.Start()
	b.push(t, "a", "j1")
	wait.For(t, "the first job", func() bool { return b.processed() == 1 })
	b.quietNow()
	f.Wait()

	li := f.slots[0].identity(f.ids)
	list := li.listKey(contract.QueueKey("b"))
	f.ids.mu.Lock()
	delete(li.lists, contract.QueueKey("b"))
	f.ids.mu.Unlock()
	_, err := b.conn.Do("SREM", contract.KeyWorkingLists, list)
	require.NoError(t, err)
	_, err = b.conn.Do("LPUSH", list, "stray")
	require.NoError(t, err)

	f.Close()
	require.Equal(t, []string{"stray"}, b.queue(t, "b"))
	require.Empty(t, b.keys(t, "working:*"))
}

// While the heartbeats cannot be confirmed no job is taken, and the fetch
// says so (the server's /readyz is 503); once they are, it is healthy
// again without waiting for a job.
func TestReliableUnconfirmedHeartbeatsAreAFailure(t *testing.T) {
	t.Parallel()
	health := &Health{}
	b := reliableBundle(t, nil, func(c *Config) { c.Health = health })
	var f *reliableFetch
	b.finishWith(func() Fetcher { return f })
	f = newReliable(t, b)
	halt(f.life)
	b.start(t, f)
	f.ids.confirmed.Store(time.Now().Add(-time.Minute).UnixNano())
	f.ids.age()
	wait.For(t, "the fetch to report the failure", func() bool {
		_, err := health.Failing()
		return err == errUnconfirmed
	})
	require.Zero(t, b.processed())
	f.ids.confirm(time.Now())
	wait.For(t, "healthy again", func() bool { since, _ := health.Failing(); return since.IsZero() })
	b.push(t, "default", "j1")
	wait.For(t, "the job", func() bool { return b.processed() == 1 })
}
