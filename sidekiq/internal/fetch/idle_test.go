package fetch

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/wire"
)

// An idle reliable fetch beside five idle BasicFetch threads (each a
// client blocked in `BRPOP queue:q 2`, as a Ruby Sidekiq thread is) takes
// its share of a trickle: its idle slots wait in Redis's queue of blocked
// clients with a blocking move into their own lists, and every job it
// takes is in one of them until it is acknowledged. With two weighted
// queues (the threads block on both, each slot on one drawn by weight)
// its share is smaller but not nothing.
func TestReliableIdleTakesItsShareBesideBlockedBRPOPs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		queues []wire.QueueWeight
		min    int // of 30
	}{
		{"one queue", []wire.QueueWeight{{Name: "q"}}, 9},
		{"weighted", []wire.QueueWeight{{Name: "q", Weight: 2}, {Name: "r", Weight: 1}}, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			idleShare(t, c.queues, c.min)
		})
	}
}

func idleShare(t *testing.T, queues []wire.QueueWeight, least int) {
	b := reliableBundle(t, nil, func(c *Config) {
		c.Concurrency = 5
		c.Order = NewOrder(queues, wire.Version7)
	})
	var f *reliableFetch
	var inList atomic.Int64 // jobs found in their in-progress list while they ran
	b.hook = func(u Unit) {
		c := b.pool.Get()
		_, err := redis.Int(c.Do("LPOS", u.list, u.Raw))
		c.Close()
		if err == nil {
			inList.Add(1)
		}
		f.Finish(u, nil)
	}
	f = newReliable(t, b)
	b.start(t, f)
	t.Cleanup(f.Close)

	// Five "Ruby threads".
	var keys []any
	for _, q := range queues {
		keys = append(keys, "queue:"+q.Name)
	}
	var rubyRan atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := b.rs.Dial()
			if err != nil {
				return
			}
			defer c.Close()
			for {
				select {
				case <-stop:
					return
				default:
				}
				v, err := c.Do("BRPOP", append(keys, 1)...)
				if err != nil {
					return
				}
				if v != nil {
					rubyRan.Add(1)
				}
			}
		}()
	}
	t.Cleanup(func() { close(stop); wg.Wait() })
	wait.For(t, "five BRPOPs and five blocking moves", func() bool {
		return redistest.BlockedIn(t, b.conn, "CLIENT", "brpop") == 5 &&
			redistest.BlockedIn(t, b.conn, "CLIENT", "blmove") >= 5
	})
	const n = 30
	for i := range n {
		b.push(t, queues[i%len(queues)].Name, fmt.Sprintf(`{"jid":"j%d"}`, i))
		wait.For(t, fmt.Sprintf("job %d to be taken", i), func() bool {
			return int(rubyRan.Load())+b.processed() == i+1
		})
	}
	got := b.processed()
	t.Logf("gojob ran %d of %d, the BRPOPs %d", got, n, rubyRan.Load())
	require.GreaterOrEqual(t, got, least, "gojob's share of the trickle")
	wait.For(t, "every job gojob ran to be found in its in-progress list", func() bool { return inList.Load() == int64(got) })
	wait.For(t, "the acknowledgements", func() bool { return len(b.inProgress(t)) == 0 })
}

// A burst to a queue that no blocker waits on gets every idle slot, not
// only the one whose blocker its waker cut off: while the takers' rounds
// move a job for every slot they hold, the queue may have more, and each
// such round cuts off more blockers. The blockers here would wait an hour
// before they come back on their own, and the jobs hold their slots until
// the test releases them, so no slot is freed meanwhile: without the
// cuts, one job of the four runs.
func TestReliableBurstCutsOffTheBlockersOfOtherQueues(t *testing.T) {
	t.Parallel()
	// Weighted so that each blocker draws "other" (the draws follow the
	// blockers' fixed seeds; checked below).
	b := reliableBundle(t, nil, func(c *Config) {
		c.Concurrency = 4
		c.Order = NewOrder([]wire.QueueWeight{{Name: "other", Weight: 1000}, {Name: "burst", Weight: 1}}, wire.Version7)
		c.BlockSeconds = 3600 // the blockers do not come back on their own
	})
	release := make(chan struct{})
	var running atomic.Int64
	var f *reliableFetch
	b.hook = func(u Unit) {
		running.Add(1)
		<-release
		f.Finish(u, nil)
	}
	f = newReliable(t, b)
	b.start(t, f)
	t.Cleanup(f.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	wait.For(t, "four blockers and two wakers blocked", func() bool {
		return redistest.BlockedIn(t, b.conn, "CLIENT", "blmove") == 6 && f.blockers.held.Load() == 4
	})
	for l := range f.blockers.blockingLists() {
		require.Contains(t, l, "working:queue:other:", "a blocker drew the burst's queue")
	}
	b.push(t, "burst", `{"jid":"j1"}`, `{"jid":"j2"}`, `{"jid":"j3"}`, `{"jid":"j4"}`)
	wait.For(t, "the four jobs to run at once", func() bool { return running.Load() == 4 })
	close(release)
	wait.For(t, "the acknowledgements", func() bool { return b.processed() == 4 && len(b.inProgress(t)) == 0 })
}

// A cut that reaches Redis before the blocking move it is meant for cuts
// nothing (CLIENT UNBLOCK answers 0): the blocker is marked cut again, so
// that the unblocker sends it again, and the next one, once the move is
// blocked, cuts it off. Without it the blocker kept its slot's token until
// its timeout, and the job its waker had seen waited as long.
func TestReliableCutBeforeTheMoveIsSentAgain(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, func(c *Config) { c.Concurrency = 1 })
	f := newReliable(t, b)
	t.Cleanup(f.Close)
	bs := f.blockers
	c, err := b.rs.Dial()
	require.NoError(t, err)
	defer c.Close()
	id, err := redis.Int64(c.Do("CLIENT", "ID"))
	require.NoError(t, err)

	bl := bs.list[0]
	bs.mu.Lock()
	bl.id = id
	bs.mu.Unlock()
	require.True(t, bs.blocking(bl, f.queues.list[0], "working:queue:default:x"))
	bs.mu.Lock()
	bl.cut = true
	bs.mu.Unlock()
	require.True(t, bs.unblock(false), "the move is not in Redis yet: the cut missed")
	bs.mu.Lock()
	require.True(t, bl.cut, "marked cut again")
	bs.mu.Unlock()

	returned := make(chan any, 1)
	go func() {
		v, _ := c.Do("BLMOVE", "queue:default", "working:queue:default:x", "RIGHT", "LEFT", 0)
		returned <- v
	}()
	wait.For(t, "the move blocked", func() bool { return redistest.BlockedIn(t, b.conn, "CLIENT", "blmove") == 1 })
	require.False(t, bs.unblock(false), "the cut cuts it off")
	require.Nil(t, <-returned)
}
