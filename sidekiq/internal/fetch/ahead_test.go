package fetch

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
)

// aheadBundle is a one-slot reliable fetch over queue:default holding
// jobs, whose hook is set by the test.
// inProgressKey names, in the ahead tests, the test process's in-progress
// lists taken together (see list).
const inProgressKey = "in progress"

func aheadBundle(t *testing.T, jobs ...string) (*fetchBundle, *reliableFetch, string) {
	t.Helper()
	b := reliableBundle(t, nil, func(c *Config) { c.Concurrency = 1 })
	for _, j := range jobs {
		b.conn.Send("LPUSH", "queue:default", j)
	}
	_, err := b.conn.Do("")
	require.NoError(t, err)
	return b, newReliable(t, b), inProgressKey
}

// list returns a queue list's jobs, or (inProgressKey) the jobs in the
// test process's in-progress lists.
func (b *fetchBundle) list(t *testing.T, key string) []string {
	t.Helper()
	if key == inProgressKey {
		return b.inProgress(t)
	}
	v, err := redis.Strings(b.conn.Do("LRANGE", key, 0, -1))
	require.NoError(t, err)
	return v
}

// runAhead starts f and waits until each of jobs has run exactly once and
// its acknowledgement has left the in-progress list.
func (b *fetchBundle) runAhead(t *testing.T, f Fetcher, list string, jobs ...string) {
	t.Helper()
	b.start(t, f)
	t.Cleanup(f.Close)
	wait.For(t, "every job processed", func() bool { return b.processed() == len(jobs) })
	once := map[string]int{}
	for _, j := range jobs {
		once[j] = 1
	}
	b.mu.Lock()
	require.Equal(t, once, b.runs)
	b.mu.Unlock()
	wait.For(t, "the acknowledgements sent", func() bool { return len(b.list(t, list)) == 0 })
}

// A job that calls FetchAhead lets its slot move its next jobs, up to
// aheadDepth, to the in-progress list while it runs; each is prepared on
// arrival, and they run next in their slot, in queue order, once each.
// A job taken from the slot's jobs ahead tops them up again.
func TestJobsFetchedAheadWaitInTheInProgressListAndRunNextInTheirSlot(t *testing.T) {
	t.Parallel()
	b, f, list := aheadBundle(t, "j1", "j2", "j3", "j4", "j5")
	// j1 and j2 wait for the test, and the jobs ahead wait for them; two
	// at most, so that the queue keeps some.
	f.aheadMaxRun, f.aheadHold = time.Minute, time.Minute
	f.aheadDepth = 2
	var mu sync.Mutex
	var order, prepared []string
	b.hook = func(u Unit) {
		p, _ := u.Prepared.(string)
		mu.Lock()
		order = append(order, string(u.Raw))
		prepared = append(prepared, p)
		mu.Unlock()
		require.True(t, u.FetchAhead(func(next *Unit) { next.Prepared = "prepared " + string(next.Raw) }))
		require.False(t, u.FetchAhead(nil), "one call per job")
		switch string(u.Raw) {
		case "j1":
			wait.For(t, "j2 and j3 fetched ahead into the in-progress list", func() bool {
				return len(b.list(t, list)) == 3
			})
			time.Sleep(20 * time.Millisecond) // no third job ahead
			require.ElementsMatch(t, []string{"j1", "j2", "j3"}, b.list(t, list))
			require.Equal(t, []string{"j5", "j4"}, b.list(t, "queue:default"))
		case "j2":
			wait.For(t, "j4 fetched ahead behind j3", func() bool {
				return len(b.list(t, "queue:default")) == 1
			})
			require.Equal(t, []string{"j5"}, b.list(t, "queue:default"))
			require.Subset(t, b.list(t, list), []string{"j2", "j3", "j4"}) // j1's acknowledgement may still be on its way
		}
		f.Finish(u, nil)
	}
	b.runAhead(t, f, list, "j1", "j2", "j3", "j4", "j5")
	mu.Lock()
	require.Equal(t, []string{"j1", "j2", "j3", "j4", "j5"}, order)
	require.Equal(t, []string{"", "prepared j2", "prepared j3", "prepared j4", "prepared j5"}, prepared)
	mu.Unlock()
}

// A slot holds as many jobs ahead as it would run within half of aheadHold
// at the pace of its last job, at least one and at most aheadDepth.
func TestSlotHoldsFewerJobsAheadTheLongerItsLastJobTook(t *testing.T) {
	f := &reliableFetch{aheadHold: aheadHold, aheadDepth: aheadDepth}
	for _, c := range []struct {
		last time.Duration
		want int
	}{
		{0, 16}, // the slot's first job
		{100 * time.Microsecond, 16},
		{750 * time.Microsecond, 16},
		{time.Millisecond, 12},
		{1500 * time.Microsecond, 8},
		{2 * time.Millisecond, 6},
		{3 * time.Millisecond, 4},
		{4 * time.Millisecond, 3},
		{5 * time.Millisecond, 2},
		{12 * time.Millisecond, 1},
		{time.Second, 1},
	} {
		require.Equal(t, c.want, f.aheadDepthAfter(c.last, 100), "after a job of %v", c.last)
	}
}

// A slot holds no more than aheadBytes of jobs the size of its last one
// ahead, at least one.
func TestSlotHoldsFewerJobsAheadTheLargerItsLastJob(t *testing.T) {
	f := &reliableFetch{aheadHold: aheadHold, aheadDepth: aheadDepth}
	for _, c := range []struct {
		size, want int
	}{
		{0, 16}, // the slot's first job
		{100, 16},
		{4 << 10, 16},
		{10 << 10, 6},
		{32 << 10, 2},
		{1 << 20, 1},
	} {
		require.Equal(t, c.want, f.aheadDepthAfter(100*time.Microsecond, c.size), "after a job of %d bytes", c.size)
	}
	require.Equal(t, 4, f.aheadDepthAfter(3*time.Millisecond, 10<<10), "the pace's bound when lower")
}

// Config.AheadHold sets how long a job fetched ahead waits for its slot,
// the longest last job after which a slot fetches ahead (a fifth of it)
// and so the depth; 0 keeps the defaults.
func TestAheadHoldSetsTheLimitsOfFetchingAhead(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, func(c *Config) { c.AheadHold = time.Second })
	f := newReliable(t, b)
	t.Cleanup(f.Close)
	require.Equal(t, time.Second, f.aheadHold)
	require.Equal(t, 200*time.Millisecond, f.aheadMaxRun)
	require.Equal(t, 5, f.aheadDepthAfter(100*time.Millisecond, 0))
	b = reliableBundle(t, nil, nil)
	f = newReliable(t, b)
	t.Cleanup(f.Close)
	require.Equal(t, aheadHold, f.aheadHold)
	require.Equal(t, aheadMaxRun, f.aheadMaxRun)
}

// The depth follows the slot's last job: after a job of 12 s, with 30 s
// to run the jobs ahead in (half of aheadHold), a slot fetches two ahead,
// not four. The jobs report what they took (took), so that the pace, and
// the depth, are the same on a machine of any speed or load; and aheadHold
// is long enough that no wait of the test's gives them back.
func TestSlotFetchesAheadWhatItsLastJobsPaceAllows(t *testing.T) {
	t.Parallel()
	b, f, list := aheadBundle(t, "j1", "j2", "j3", "j4", "j5", "j6")
	f.aheadMaxRun, f.aheadHold, f.aheadDepth = time.Hour, time.Minute, 4
	b.took = func(u Unit) time.Duration {
		if string(u.Raw) == "j1" {
			return 12 * time.Second
		}
		return time.Millisecond
	}
	b.hook = func(u Unit) {
		if string(u.Raw) == "j2" {
			assert.True(t, u.FetchAhead(nil))
			assert.True(t, wait.Until(func() bool { return len(b.list(t, list)) >= 3 }), "j3 and j4 fetched ahead")
			time.Sleep(20 * time.Millisecond)                             // no third one
			assert.Subset(t, b.list(t, list), []string{"j2", "j3", "j4"}) // j1's acknowledgement may still be on its way
			assert.NotContains(t, b.list(t, list), "j5")
			assert.Equal(t, []string{"j6", "j5"}, b.list(t, "queue:default"))
		}
		f.Finish(u, nil)
	}
	b.runAhead(t, f, list, "j1", "j2", "j3", "j4", "j5", "j6")
}

// Jobs fetched ahead of one that runs longer than aheadHold go back to the
// pop end of their queue, in their order (they run next, here or
// elsewhere), instead of waiting behind it; and a slot whose last job was
// long does not fetch ahead for the next one. The jobs report what they
// took (took): j1 is long, however long a loaded machine makes j2.
func TestJobsFetchedAheadGoBackToTheirQueueWhenTheirSlotIsBusyTooLong(t *testing.T) {
	t.Parallel()
	b, f, list := aheadBundle(t, "j1", "j2", "j3")
	b.took = func(u Unit) time.Duration {
		if string(u.Raw) == "j1" {
			return f.aheadMaxRun
		}
		return time.Microsecond
	}
	b.hook = func(u Unit) {
		switch string(u.Raw) {
		case "j1":
			assert.True(t, u.FetchAhead(nil))
			assert.True(t, wait.Until(func() bool { return len(b.list(t, list)) == 3 }), "j2 and j3 fetched ahead")
			assert.True(t, wait.Until(func() bool { return len(b.list(t, "queue:default")) == 2 }), "j2 and j3 given back to their queue")
			assert.Equal(t, []string{"j3", "j2"}, b.list(t, "queue:default"), "j2 at the pop end")
			assert.Equal(t, []string{"j1"}, b.list(t, list))
		case "j2":
			assert.False(t, u.FetchAhead(nil), "no fetch ahead after a long job")
		case "j3":
			assert.True(t, u.FetchAhead(nil), "j2 was short")
		}
		f.Finish(u, nil)
	}
	b.runAhead(t, f, list, "j1", "j2", "j3")
}

// When the server goes quiet, the jobs fetched ahead go back to their
// queue at once, in their order, while the job they were fetched for
// still runs; nothing is left in the in-progress list once that one is
// done.
func TestJobsFetchedAheadGoBackToTheirQueueAtQuiet(t *testing.T) {
	t.Parallel()
	b, f, list := aheadBundle(t, "j1", "j2", "j3")
	b.hook = func(u Unit) {
		require.Equal(t, "j1", string(u.Raw), "j2 and j3 never run")
		require.True(t, u.FetchAhead(nil))
		wait.For(t, "j2 and j3 fetched ahead", func() bool { return len(b.list(t, list)) == 3 })
		b.quietNow()
		wait.For(t, "j2 and j3 back in their queue while j1 runs", func() bool {
			return len(b.list(t, "queue:default")) == 2
		})
		f.Finish(u, nil)
	}
	f.Start()
	wait.For(t, "j1 processed", func() bool { return b.processed() == 1 })
	f.Wait()
	f.Close()
	require.Equal(t, []string{"j3", "j2"}, b.list(t, "queue:default"), "j2 at the pop end")
	require.Empty(t, b.keys(t, "working:*"))
}

// The own-list sweep takes a job in an in-progress list for an orphan
// only when no slot holds it: the jobs a slot fetched ahead are in its
// mirror until they run and are acknowledged, or go back.
func TestSlotHoldsTheJobsItFetchedAheadUntilTheyRunOrGoBack(t *testing.T) {
	t.Parallel()
	ids := newIdents(testIdentity)
	st := newSlotState(0)
	sl, sm := st.list(ids, &queueState{key: "queue:l"}), st.list(ids, &queueState{key: "queue:m", i: 1})
	l, m := sl.key, sm.key
	running := st.moved(sl, []byte("j1"))
	ahead1 := st.moved(sl, []byte("j2"))
	ahead2 := st.moved(sm, []byte("j3"))
	held := func() map[string]map[string]int {
		in := map[string]map[string]int{}
		st.heldIn(in)
		return in
	}
	require.Equal(t, map[string]map[string]int{l: {"j1": 1, "j2": 1}, m: {"j3": 1}}, held())
	require.True(t, st.trimByPosition(running), "j1 finished: the oldest of its list")
	require.Equal(t, map[string]map[string]int{l: {"j1": 1, "j2": 1}, m: {"j3": 1}}, held(), "held until its LTRIM has run")
	st.release(running)
	require.Equal(t, map[string]map[string]int{l: {"j2": 1}, m: {"j3": 1}}, held())
	st.release(ahead2) // j3 given back
	require.Equal(t, map[string]map[string]int{l: {"j2": 1}}, held())
	st.release(ahead2) // no longer held: nothing changes
	require.Equal(t, map[string]map[string]int{l: {"j2": 1}}, held())
	st.release(ahead1)
	require.Empty(t, held())
}

// The slots' fetches ahead asked for while a round is on its way go
// together in the next round: fewer round trips than fetches, and every
// job still runs once.
func TestSlotsFetchingAheadShareRoundTrips(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, func(c *Config) { c.Concurrency = 8 })
	jobs := numbered(400)
	b.push(t, "default", jobs...)
	f := newReliable(t, b)
	f.aheadMaxRun, f.aheadHold = time.Minute, time.Minute
	var fetched atomic.Int64
	b.hook = func(u Unit) {
		// The slots ask at the same moments (every 2 ms), as slots whose
		// jobs wait for the same group commit do.
		now := time.Now()
		time.Sleep(now.Truncate(2 * time.Millisecond).Add(2 * time.Millisecond).Sub(now))
		u.FetchAhead(func(*Unit) { fetched.Add(1) })
		f.Finish(u, nil)
	}
	b.runAhead(t, f, inProgressKey, jobs...)
	rounds := f.batcher.rounds.Load()
	t.Logf("%d jobs fetched ahead in %d round trips", fetched.Load(), rounds)
	require.Positive(t, fetched.Load())
	require.Less(t, 2*rounds, fetched.Load(), "the slots' requests share round trips: a slot alone asks for one job per job it runs")
}

// While every slot is busy, a slot whose jobs are short fetches its next
// jobs ahead on its own (Config.Prepare prepares each): the busy slots'
// moves share round trips, and every job still runs once. The jobs report
// a short run (took) and aheadHold is long: a slot that a loaded machine
// leaves waiting longer than aheadHold gives its jobs back, another slot
// fetches them ahead again, and Prepare runs again for the same job (one
// Prepare per fetch, not per job; a job given back and then taken by a
// taker runs without one), which is fetching ahead as designed, not what
// this test counts.
func TestBusySlotsFetchAheadOnTheirOwn(t *testing.T) {
	t.Parallel()
	var prepared atomic.Int64
	b := reliableBundle(t, nil, func(c *Config) {
		c.Concurrency = 4
		c.Prepare = func(next *Unit) {
			prepared.Add(1)
			next.Prepared = "prepared"
		}
	})
	jobs := numbered(300)
	b.push(t, "default", jobs...)
	f := newReliable(t, b)
	f.aheadHold = time.Hour
	b.took = func(Unit) time.Duration { return 100 * time.Microsecond }
	var seenPrepared atomic.Int64
	b.hook = func(u Unit) {
		if u.Prepared == "prepared" {
			seenPrepared.Add(1)
		}
		time.Sleep(100 * time.Microsecond)
		f.Finish(u, nil)
	}
	b.runAhead(t, f, inProgressKey, jobs...)
	t.Logf("%d of %d jobs fetched ahead, in %d round trips", prepared.Load(), len(jobs), f.batcher.rounds.Load())
	require.Greater(t, prepared.Load(), int64(len(jobs)/2), "most jobs were fetched ahead by busy slots")
	require.Equal(t, prepared.Load(), seenPrepared.Load(), "each job fetched ahead ran with what Prepare made of it")
	require.Less(t, f.batcher.rounds.Load(), prepared.Load(), "the busy slots' moves share round trips")
}

// While a slot is idle, a slot that starts a job fetches nothing ahead on
// its own (idleSlots: an idle slot's token waits for a taker, or the last
// round found a queue empty), and once no slot is idle it does. The test
// is the slot and sets the fetch's state itself: with the takers running,
// the moment a taker holds the idle slots' tokens after a round that
// found jobs counts as "no slot idle" by design (ahead.go, "Busy slots"),
// and whether a slot starts its job in that moment is up to the scheduler.
func TestNoFetchAheadWhileASlotIsIdle(t *testing.T) {
	t.Parallel()
	var prepared atomic.Int64
	b := reliableBundle(t, nil, func(c *Config) {
		c.Concurrency = 2
		c.Prepare = func(*Unit) { prepared.Add(1) }
	})
	jobs := numbered(4)
	b.push(t, "default", jobs...)
	f := newReliable(t, b)    // not started: no taker or worker but the test
	f.aheadMaxRun = time.Hour // however long Process takes on a busy machine
	f.aheadHold = time.Hour   // what it fetches waits for the end of the test
	a := newAhead(f, f.slots[0], NewRand(1))
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			b.quietNow()
			a.close()
			f.wg.Wait()
			f.Close()
		}
	}
	t.Cleanup(stop)
	asked := func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.started
	}
	run := func() { a.process(0, Unit{Queue: "default", Raw: []byte("running")}) }

	f.idle <- 1 // slot 1 is idle: its token waits for a taker
	run()
	require.False(t, asked(), "a slot fetched ahead while another's token waited for a taker")
	<-f.idle // a taker took it
	f.dry.Store(true)
	run()
	require.False(t, asked(), "a slot fetched ahead after a round found the queue empty")

	f.dry.Store(false) // every slot busy, the queue has jobs
	run()
	require.True(t, asked(), "a busy slot fetches ahead")
	wait.For(t, "the jobs fetched ahead", func() bool { return prepared.Load() > 0 })

	// Quiet: what the slot holds goes back to its queue.
	stop()
	require.ElementsMatch(t, jobs, b.queue(t, "default"))
	require.Empty(t, b.inProgress(t))
}

// Jobs go to the idle slots and run in parallel, not one after another in
// a busy slot: each job here waits until the three run at once. A busy
// slot may still fetch one ahead in the moment a taker holds the idle
// slots' tokens (ahead.go, "Busy slots"); it gives it back after aheadHold
// and an idle slot runs it, so the three still meet.
func TestIdleSlotsRunTheJobsInParallel(t *testing.T) {
	t.Parallel()
	var prepared atomic.Int64
	b := reliableBundle(t, nil, func(c *Config) {
		c.Concurrency = 4
		c.Prepare = func(*Unit) { prepared.Add(1) }
	})
	f := newReliable(t, b)
	var running atomic.Int64
	b.hook = func(u Unit) {
		running.Add(1)
		assert.True(t, wait.Until(func() bool { return running.Load() >= 3 }), "the three jobs running at once")
		f.Finish(u, nil)
	}
	jobs := []string{"j1", "j2", "j3"}
	b.push(t, "default", jobs...)
	b.start(t, f)
	t.Cleanup(f.Close)
	wait.For(t, "every job processed", func() bool { return b.processed() == len(jobs) })
	wait.For(t, "the acknowledgements sent", func() bool { return len(b.inProgress(t)) == 0 })
	b.mu.Lock()
	for _, j := range jobs {
		assert.Equal(t, 1, b.runs[j], j)
	}
	b.mu.Unlock()
	t.Logf("%d fetched ahead", prepared.Load())
}

// A negative Config.AheadDepth turns fetching ahead off, for busy slots
// and for jobs that ask alike.
func TestFetchAheadOff(t *testing.T) {
	t.Parallel()
	var prepared atomic.Int64
	b := reliableBundle(t, nil, func(c *Config) {
		c.Concurrency = 2
		c.AheadDepth = -1
		c.Prepare = func(*Unit) { prepared.Add(1) }
	})
	jobs := numbered(50)
	b.push(t, "default", jobs...)
	f := newReliable(t, b)
	b.hook = func(u Unit) {
		require.False(t, u.FetchAhead(nil))
		f.Finish(u, nil)
	}
	b.runAhead(t, f, inProgressKey, jobs...)
	require.Zero(t, prepared.Load())
	require.Zero(t, f.batcher.rounds.Load())
}

// numbered returns n jobs named j0 … j<n-1>.
func numbered(n int) []string {
	jobs := make([]string, n)
	for i := range jobs {
		jobs[i] = fmt.Sprintf("j%d", i)
	}
	return jobs
}

// gatedConn holds back the scripts run on it (the requeue's) until gate
// is closed, and tells entered when one is waiting.
type gatedConn struct {
	redis.Conn
	gate, entered chan struct{}
}

func (c gatedConn) Do(cmd string, args ...any) (any, error) {
	return c.DoContext(context.Background(), cmd, args...)
}

func (c gatedConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	if cmd == "EVALSHA" || cmd == "EVAL" {
		select {
		case c.entered <- struct{}{}:
		default:
		}
		<-c.gate
	}
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

func (c gatedConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

// Jobs given back stay in their slot's mirror until their requeue has
// run: a job the slot takes meanwhile into the same list is not its
// list's oldest, and its acknowledgement goes by value. By position
// (LTRIM list 0 -2) it would take out a job being given back, which
// would then never run, and leave itself in the list.
func TestJobsGivenBackKeepTheirPlaceUntilTheirRequeueRan(t *testing.T) {
	t.Parallel()
	gate, entered := make(chan struct{}), make(chan struct{}, 1)
	var open sync.Once
	b, f, list := aheadBundle(t, "j1", "j2", "j3")
	base := b.cfg.Writes.Pool
	b.cfg.Writes = &redisx.Retrier{Ctx: b.cfg.Writes.Ctx, Outage: b.cfg.Writes.Outage, Pool: &redis.Pool{
		Dial: func() (redis.Conn, error) {
			c, err := base.Dial()
			return gatedConn{Conn: c, gate: gate, entered: entered}, err
		},
	}}
	f.aheadMaxRun, f.aheadHold, f.aheadDepth = time.Minute, time.Millisecond, 2
	b.hook = func(u Unit) {
		if string(u.Raw) == "j1" {
			require.True(t, u.FetchAhead(nil))
			select {
			case <-entered: // j2 and j3 fetched ahead and being given back
			case <-time.After(10 * time.Second):
				t.Error("j2 and j3 were not given back")
			}
		}
		f.Finish(u, nil)
	}
	b.start(t, f)
	t.Cleanup(f.Close)
	t.Cleanup(func() { open.Do(func() { close(gate) }) }) // before the fetch stops
	wait.For(t, "j1 processed", func() bool { return b.processed() == 1 })
	_, err := b.conn.Do("LPUSH", "queue:default", "j4")
	require.NoError(t, err)
	wait.For(t, "j4 processed while j2 and j3 wait for their requeue", func() bool { return b.processed() == 2 })
	wait.For(t, "j4 acknowledged", func() bool { return !slices.Contains(b.list(t, list), "j4") })
	require.ElementsMatch(t, []string{"j2", "j3"}, b.list(t, list), "j4's acknowledgement took out j4 only")
	open.Do(func() { close(gate) })
	wait.For(t, "every job processed", func() bool { return b.processed() == 4 })
	b.mu.Lock()
	require.Equal(t, map[string]int{"j1": 1, "j2": 1, "j3": 1, "j4": 1}, b.runs)
	b.mu.Unlock()
	wait.For(t, "the in-progress list empty", func() bool { return len(b.list(t, list)) == 0 })
}

// received waits for c, for up to wait.DefaultTimeout, and reports
// whether it came (with assert: from any goroutine).
func received(t *testing.T, c <-chan struct{}, what string) bool {
	select {
	case <-c:
		return true
	case <-time.After(wait.DefaultTimeout):
		return assert.Fail(t, "timed out waiting for "+what)
	}
}

// replyGate is gateReplies': once armed, the first reply read on a
// connection the fetch dials waits until open.
type replyGate struct {
	armed   atomic.Bool
	gate    chan struct{}
	entered chan struct{} // a reply is being held back
	once    sync.Once
}

func (g *replyGate) open() { g.once.Do(func() { close(g.gate) }) }

// gateReplies wraps the connections b's fetch dials in receiveGates (not
// corkable connections: their rounds go through redigo). Whoever arms the
// gate opens it on every path (defer g.open()), or the fetch cannot stop.
func gateReplies(b *fetchBundle) *replyGate {
	g := &replyGate{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	dial := b.cfg.Dial
	b.cfg.Dial = func(ctx context.Context) (redis.Conn, error) {
		c, err := dial(ctx)
		if err != nil {
			return nil, err
		}
		return receiveGate{Conn: c, armed: &g.armed, gate: g.gate, entered: g.entered}, nil
	}
	return g
}

// receiveGate holds back, once armed, the first reply read on it until
// gate is closed, and tells entered when one is waiting.
type receiveGate struct {
	redis.Conn
	armed         *atomic.Bool
	gate, entered chan struct{}
}

func (c receiveGate) Receive() (any, error) {
	if c.armed.CompareAndSwap(true, false) {
		c.entered <- struct{}{}
		<-c.gate
	}
	return c.Conn.Receive()
}

// Jobs whose fetch ahead was on its way when the slot went quiet are
// given back when they arrive: the slot will not take them, and they must
// not wait in its in-progress list for a recovery.
func TestJobsArrivingAfterQuietGoBackToTheirQueue(t *testing.T) {
	t.Parallel()
	hookDone := make(chan struct{})
	b, f, list := aheadBundle(t, "j1", "j2", "j3")
	g := gateReplies(b)
	f.aheadMaxRun, f.aheadHold, f.aheadDepth = time.Minute, time.Minute, 2
	b.hook = func(u Unit) {
		if string(u.Raw) == "j1" {
			// On the slot's goroutine: assert, not require, and the gate
			// opens whatever happens.
			func() {
				defer close(hookDone)
				defer g.open()
				g.armed.Store(true)
				if !assert.True(t, u.FetchAhead(nil)) || !received(t, g.entered, "the fetch ahead's replies held back") {
					return
				}
				assert.True(t, wait.Until(func() bool { return len(b.list(t, list)) == 3 }), "j2 and j3 moved to the in-progress list")
				close(b.quiet)
				time.Sleep(50 * time.Millisecond) // the slot's loop sees quiet first
			}()
		}
		f.Finish(u, nil)
	}
	b.start(t, f)
	t.Cleanup(f.Close)
	<-hookDone // b.conn is the hook's until then
	wait.For(t, "j2 and j3 back in their queue", func() bool {
		return len(b.list(t, "queue:default")) == 2 && len(b.list(t, list)) == 0
	})
	require.Equal(t, []string{"j3", "j2"}, b.list(t, "queue:default"), "j2 is popped first")
	b.mu.Lock()
	require.Equal(t, map[string]int{"j1": 1}, b.runs)
	b.mu.Unlock()
}

// Jobs the batcher has moved but not yet handed to their slot are no
// orphans: a sweep of the own lists whose two looks fall while the round
// is on its way leaves them, and each runs once.
func TestSweepLeavesJobsOfABatcherRoundOnItsWay(t *testing.T) {
	t.Parallel()
	b, f, list := aheadBundle(t, "j1", "j2", "j3")
	g := gateReplies(b)
	f.aheadMaxRun, f.aheadHold, f.aheadDepth = time.Minute, time.Minute, 2
	life := f.life
	halt(life)
	life.sweepDelay = 0
	life.dropped = func() int64 { return 1 } // a round trip failed: the sweep looks
	b.hook = func(u Unit) {
		if string(u.Raw) == "j1" {
			// On the slot's goroutine: assert, not require, and the gate
			// opens whatever happens.
			func() {
				defer g.open()
				g.armed.Store(true)
				if !assert.True(t, u.FetchAhead(nil)) || !received(t, g.entered, "the fetch ahead's replies held back") {
					return
				}
				if !assert.True(t, wait.Until(func() bool { return len(b.list(t, list)) == 3 }), "j2 and j3 moved to the in-progress list") {
					return
				}
				assert.NoError(t, life.sweepOwn(false)) // first look
				assert.NoError(t, life.sweepOwn(false)) // second look
				assert.Empty(t, b.list(t, "queue:default"), "nothing requeued")
			}()
		}
		f.Finish(u, nil)
	}
	b.runAhead(t, f, list, "j1", "j2", "j3")
}
