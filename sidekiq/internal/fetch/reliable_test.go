package fetch

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/procstat"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/wire"
)

const testIdentity = "testhost:4242:0123456789ab"

// halt stops a life's background loop, so that a test drives its passes.
func halt(l *reliableLife) {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.done
}

func reliableBundle(t *testing.T, rs *redistest.Server, mod func(*Config)) *fetchBundle {
	t.Helper()
	return newFetchBundle(t, rs, func(c *Config) {
		c.Identity = testIdentity
		c.Format = wire.FixedFormat(wire.Version7)
		if mod != nil {
			mod(c)
		}
	})
}

// newReliable builds the fetch of mode ("reliable" or "reliable-batch").
func newReliable(t *testing.T, b *fetchBundle, mode string) Fetcher {
	t.Helper()
	var f Fetcher
	var err error
	if mode == "reliable" {
		f, err = NewReliable(context.Background(), b.cfg)
	} else {
		f, err = NewReliableBatch(context.Background(), b.cfg)
	}
	require.NoError(t, err)
	return f
}

// finishAll makes every processed job a success, as the server does.
func (b *fetchBundle) finishWith(f func() Fetcher) {
	b.hook = func(u Unit) { f().Finish(u, nil) }
}

func (b *fetchBundle) keys(t *testing.T, pattern string) []string {
	t.Helper()
	keys, err := redis.Strings(b.conn.Do("KEYS", pattern))
	require.NoError(t, err)
	return keys
}

// Every job moves through the in-progress list and is processed exactly
// once; at stop nothing is left behind: no list, no registry entry, no
// heartbeat.
func TestReliableProcessesEachJobOnceAndLeavesNothing(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"reliable", "reliable-batch"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			b := reliableBundle(t, nil, func(c *Config) { c.Concurrency, c.Pipeline = 20, 8 })
			const n = 3000
			for i := 0; i < n; i++ {
				b.conn.Send("LPUSH", "queue:default", fmt.Sprintf(`{"class":"Job","args":[],"jid":"j%d","queue":"default"}`, i))
			}
			_, err := b.conn.Do("")
			require.NoError(t, err)
			var f Fetcher
			b.finishWith(func() Fetcher { return f })
			f = newReliable(t, b, mode)
			hb, err := redis.String(b.conn.Do("GET", wire.ReliableHeartbeatKey(testIdentity)))
			require.NoError(t, err, "the heartbeat is written before the first fetch")
			require.Contains(t, hb, "gojob ")
			f.Start()
			wait.For(t, "every job processed", func() bool { return b.processed() >= n })
			b.quietNow()
			f.Wait()
			f.Close()
			b.mu.Lock()
			require.Len(t, b.runs, n)
			for raw, c := range b.runs {
				require.Equal(t, 1, c, raw)
			}
			b.mu.Unlock()
			require.Empty(t, b.keys(t, "working:*"), "the in-progress list is empty")
			require.Empty(t, b.keys(t, "reliable-fetcher-heartbeat-*"), "the heartbeat is gone at stop")
			require.Empty(t, b.keys(t, wire.KeyWorkingLists))
			for _, other := range []string{"brpop", "blmpop", "lpop", "rpop"} {
				require.Zero(t, redistest.CommandCalls(t, b.conn, other), other)
			}
		})
	}
}

// With several queues, a job comes from the first non-empty queue in
// strict order, and an idle slot still notices a job pushed to a queue
// other than the first.
func TestReliableSeveralQueuesInStrictOrder(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, func(c *Config) {
		c.Concurrency, c.Pipeline = 1, 1
		c.Order = NewOrder([]wire.QueueWeight{{Name: "high"}, {Name: "low"}}, wire.Version7)
	})
	var order []string
	var mu sync.Mutex
	var f Fetcher
	b.hook = func(u Unit) {
		mu.Lock()
		order = append(order, u.Queue+":"+string(u.Raw))
		mu.Unlock()
		f.Finish(u, nil)
	}
	_, err := b.conn.Do("LPUSH", "queue:low", "l1", "l2")
	require.NoError(t, err)
	_, err = b.conn.Do("LPUSH", "queue:high", "h1", "h2")
	require.NoError(t, err)
	f = newReliable(t, b, "reliable")
	b.start(t, f)
	t.Cleanup(f.Close)
	wait.For(t, "four jobs", func() bool { return b.processed() == 4 })
	mu.Lock()
	require.Equal(t, []string{"high:h1", "high:h2", "low:l1", "low:l2"}, order)
	mu.Unlock()
	// Idle now: a job on the second queue is still picked up.
	_, err = b.conn.Do("LPUSH", "queue:low", "l3")
	require.NoError(t, err)
	wait.Within(t, 3*time.Second, "the job pushed to the second queue", func() bool { return b.processed() == 5 })
}

// A failure's outcome is written only while the job is still in this
// process's list: once another process recovered it, writing a retry too
// would run it twice.
func TestReliableFinishWritesOnlyWhatItStillOwns(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, nil)
	f := newReliable(t, b, "reliable")
	t.Cleanup(f.Close)
	list := wire.WorkingListKey("default", testIdentity)
	at := time.Unix(1795296600, 0)
	_, err := b.conn.Do("LPUSH", list, "owned")
	require.NoError(t, err)
	require.NoError(t, f.Finish(Unit{Queue: "default", Raw: []byte("owned"), list: list},
		&Outcome{Set: wire.KeyRetry, At: at, Payload: []byte("owned-retry")}))
	require.NoError(t, f.Finish(Unit{Queue: "default", Raw: []byte("recovered"), list: list},
		&Outcome{Set: wire.KeyRetry, At: at, Payload: []byte("recovered-retry")}))
	retries, err := redis.Strings(b.conn.Do("ZRANGE", wire.KeyRetry, 0, -1, "WITHSCORES"))
	require.NoError(t, err)
	require.Equal(t, []string{"owned-retry", "1795296600"}, retries)
	// A dead entry carries the dead set's trims.
	_, err = b.conn.Do("LPUSH", list, "poison")
	require.NoError(t, err)
	_, err = b.conn.Do("ZADD", wire.KeyDead, wire.Score(at.Add(-200*24*time.Hour)), "ancient")
	require.NoError(t, err)
	require.NoError(t, f.Finish(Unit{Queue: "default", Raw: []byte("poison"), list: list},
		&Outcome{Set: wire.KeyDead, At: at, Payload: []byte("poison-dead")}))
	dead, err := redis.Strings(b.conn.Do("ZRANGE", wire.KeyDead, 0, -1))
	require.NoError(t, err)
	require.Equal(t, []string{"poison-dead"}, dead, "the dead-set write trims entries older than 180 days")
	require.Empty(t, b.keys(t, list))
}

// Requeue (quiet, hard shutdown) moves jobs from the in-progress list to
// the pop end of their queue; a job no longer in the list is not pushed,
// so a hard-shutdown requeue never duplicates a recovered job.
func TestReliableRequeueCannotDuplicate(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, nil)
	f := newReliable(t, b, "reliable")
	t.Cleanup(f.Close)
	list := wire.WorkingListKey("default", testIdentity)
	_, err := b.conn.Do("LPUSH", list, "a", "b")
	require.NoError(t, err)
	_, err = b.conn.Do("LPUSH", "queue:default", "newer")
	require.NoError(t, err)
	units := []Unit{{Queue: "default", Raw: []byte("a"), list: list}, {Queue: "default", Raw: []byte("gone"), list: list}, {Queue: "default", Raw: []byte("b"), list: list}}
	require.NoError(t, f.Requeue(units))
	require.Equal(t, []string{"newer", "a", "b"}, b.queue(t, "default"), "requeued at the pop end, b popped first")
	require.Empty(t, b.keys(t, list))
}

// deadList writes the in-progress list of another process.
func deadList(t *testing.T, b *fetchBundle, identity string, jobs ...string) string {
	t.Helper()
	list := wire.WorkingListKey("default", identity)
	for _, j := range jobs {
		// As the owner fetched them: the oldest at the tail.
		_, err := b.conn.Do("LPUSH", list, j)
		require.NoError(t, err)
	}
	_, err := b.conn.Do("SADD", wire.KeyWorkingLists, list)
	require.NoError(t, err)
	return list
}

func job(jid string) string {
	return `{"retry":true,"queue":"default","class":"Job","args":[],"jid":"` + jid + `","created_at":1795296573.0}`
}

// The jobs of a process that is gone go back to the pop end of their
// queue with their original bytes, oldest first, before the jobs pushed
// meanwhile; the list and its registry entry go away. Live owners (either
// heartbeat present) are never touched.
func TestRecoveryPushesOrphansBackBeforeNewerJobs(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, nil)
	f := newReliable(t, b, "reliable")
	t.Cleanup(f.Close)
	life := f.(*reliableFetch).life
	halt(life)
	dead := deadList(t, b, "gone:1:aaaaaaaaaaaa", job("old"), job("young"))
	liveGLF := deadList(t, b, "ruby:2:bbbbbbbbbbbb", job("ruby-running"))
	_, err := b.conn.Do("SET", wire.ReliableHeartbeatKey("ruby:2:bbbbbbbbbbbb"), "1", "EX", 60)
	require.NoError(t, err)
	liveSidekiq := deadList(t, b, "go:3:cccccccccccc", job("go-running"))
	_, err = b.conn.Do("HSET", "go:3:cccccccccccc", "info", "{}")
	require.NoError(t, err)
	_, err = b.conn.Do("LPUSH", "queue:default", "newer")
	require.NoError(t, err)

	require.NoError(t, life.pass(nil))
	require.Equal(t, []string{"newer", job("young"), job("old")}, b.queue(t, "default"), "old is popped first")
	require.Empty(t, b.keys(t, dead))
	registered, err := redis.Strings(b.conn.Do("SMEMBERS", wire.KeyWorkingLists))
	require.NoError(t, err)
	require.ElementsMatch(t, []string{liveGLF, liveSidekiq, wire.WorkingListKey("default", testIdentity)}, registered)
	n, err := redis.Int(b.conn.Do("LLEN", liveGLF))
	require.NoError(t, err)
	require.Equal(t, 1, n, "a list whose gem heartbeat lives is left alone")
	n, err = redis.Int(b.conn.Do("LLEN", liveSidekiq))
	require.NoError(t, err)
	require.Equal(t, 1, n, "a list whose Sidekiq process hash lives is left alone")
	count, err := redis.Int(b.conn.Do("GET", wire.RecoveryCountKey("old")))
	require.NoError(t, err)
	require.Equal(t, 1, count)
}

// Several processes recovering the same list at the same moment move each
// job exactly once.
func TestConcurrentRecoveryMovesEachJobOnce(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	var lives []*reliableLife
	var b *fetchBundle
	for i := range 6 {
		bi := reliableBundle(t, rs, func(c *Config) { c.Identity = fmt.Sprintf("rec%d:%d:0123456789ab", i, 100+i) })
		f := newReliable(t, bi, "reliable")
		t.Cleanup(f.Close)
		halt(f.(*reliableFetch).life)
		lives = append(lives, f.(*reliableFetch).life)
		b = bi
	}
	var jobs []string
	for i := range 300 {
		jobs = append(jobs, job(fmt.Sprintf("c%03d", i)))
	}
	deadList(t, b, "crashed:9:dddddddddddd", jobs...)
	var wg sync.WaitGroup
	for _, l := range lives {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := l.recoverList(wire.WorkingListKey("default", "crashed:9:dddddddddddd"))
			require.NoError(t, err)
		}()
	}
	wg.Wait()
	require.ElementsMatch(t, jobs, b.queue(t, "default"))
}

// A job recovered the third time (counting the gem's interrupted_count) is
// a poison pill: it goes to the dead set with a clear error, once, and the
// death handlers hear of it.
func TestRecoveryBuriesPoisonPills(t *testing.T) {
	t.Parallel()
	var died []string
	stats := &Stats{}
	b := reliableBundle(t, nil, func(c *Config) {
		c.Died = func(j *wire.Job, err error) { died = append(died, j.JID()+": "+err.Error()) }
		c.Stats = stats
	})
	f := newReliable(t, b, "reliable")
	t.Cleanup(f.Close)
	life := f.(*reliableFetch).life
	halt(life)
	_, err := b.conn.Do("SET", wire.RecoveryCountKey("pill"), 2)
	require.NoError(t, err)
	ruby := `{"retry":true,"queue":"default","class":"Job","args":[],"jid":"ruby-pill","interrupted_count":2}`
	deadList(t, b, "gone:1:aaaaaaaaaaaa", job("pill"), ruby, job("fine"))
	require.NoError(t, life.pass(nil))
	require.Equal(t, []string{job("fine")}, b.queue(t, "default"))
	dead, err := redis.Strings(b.conn.Do("ZRANGE", wire.KeyDead, 0, -1))
	require.NoError(t, err)
	require.Len(t, dead, 2)
	for _, d := range dead {
		j, err := wire.ParseJob([]byte(d))
		require.NoError(t, err)
		require.Equal(t, "Gojob::PoisonPill", j.ErrorClass())
		require.Contains(t, j.ErrorMessage(), "died 3 times")
		_, ok := j.FailedAt()
		require.True(t, ok)
	}
	require.Len(t, died, 2)
	require.Equal(t, int64(1), stats.Recovered.Load())
	require.Equal(t, int64(2), stats.PoisonPills.Load())
	require.Empty(t, b.keys(t, wire.RecoveryCountKey("pill")), "a buried job's count is dropped")
}

// On the same machine, a predecessor whose heartbeat has not expired yet
// is known to be gone when its pid is no longer the process that started
// then (a restarted container reusing this process's pid included); a
// process that still runs, and another server of this very process, are
// left alone.
func TestRecoveryTakesSameHostPredecessorsAtOnce(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, nil)
	f := newReliable(t, b, "reliable")
	t.Cleanup(f.Close)
	life := f.(*reliableFetch).life
	halt(life)
	boot := procstat.BootID()
	sleeper := exec.Command("sleep", "30")
	require.NoError(t, sleeper.Start())
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	spid := sleeper.Process.Pid
	cases := []struct {
		identity, hb string
		gone         bool
	}{
		{fmt.Sprintf("h:%d:aaaaaaaaaaaa", os.Getpid()), "gojob " + boot + " 1", true},
		{fmt.Sprintf("h:%d:ffffffffffff", os.Getpid()), "gojob " + boot + " " + procstat.StartTime(os.Getpid()), false},
		{fmt.Sprintf("h:%d:bbbbbbbbbbbb", spid), "gojob " + boot + " " + procstat.StartTime(spid), false},
		{fmt.Sprintf("h:%d:cccccccccccc", spid), "gojob " + boot + " 99", true},
		{fmt.Sprintf("h:%d:dddddddddddd", spid), "gojob other-boot 99", false},
		{fmt.Sprintf("h:%d:eeeeeeeeeeee", spid), "1", false},
	}
	for _, c := range cases {
		list := deadList(t, b, c.identity, job(c.identity))
		_, err := b.conn.Do("SET", wire.ReliableHeartbeatKey(c.identity), c.hb, "EX", 60)
		require.NoError(t, err)
		moved, err := life.recoverList(list)
		require.NoError(t, err)
		require.Equal(t, c.gone, moved == 1, c.identity+" "+c.hb)
	}
}

// A fetch whose connection was dropped may still have moved a job that no
// slot holds; the sweep of the own list puts it back after two looks, and
// never touches a job a slot holds.
func TestSweepRequeuesOwnJobsNoSlotHolds(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, nil)
	f := newReliable(t, b, "reliable")
	t.Cleanup(f.Close)
	life := f.(*reliableFetch).life
	halt(life)
	list := wire.WorkingListKey("default", testIdentity)
	held := &slotState{}
	held.hold(list, []byte("running"))
	var dropped int64
	life.holders = func() map[string]map[string]int { m := map[string]map[string]int{}; held.held(m); return m }
	life.dropped = func() int64 { return dropped }
	life.waitingSince = func() int64 { return 0 }
	life.sweepDelay = 0
	_, err := b.conn.Do("LPUSH", list, "running", "stray")
	require.NoError(t, err)
	require.NoError(t, life.sweepOwn(false))
	require.Empty(t, b.queue(t, "default"), "nothing without a dropped connection")
	dropped = 1
	require.NoError(t, life.sweepOwn(false)) // first look
	require.Empty(t, b.queue(t, "default"))
	require.NoError(t, life.sweepOwn(false)) // second look
	require.Equal(t, []string{"stray"}, b.queue(t, "default"))
	vals, err := redis.Strings(b.conn.Do("LRANGE", list, 0, -1))
	require.NoError(t, err)
	require.Equal(t, []string{"running"}, vals)
}

// The keys are the gitlab-sidekiq-fetcher gem's, which its own regexes
// parse (queue names may hold colons).
func TestWorkingListKeysParseAsTheGemDoes(t *testing.T) {
	t.Parallel()
	for _, q := range []string{"default", "namespace:deeper:assigned"} {
		key := wire.WorkingListKey(q, testIdentity)
		require.Equal(t, "working:queue:"+q+":"+testIdentity, key)
		gotQ, id, ok := wire.ParseWorkingListKey(key)
		require.True(t, ok)
		require.Equal(t, q, gotQ)
		require.Equal(t, testIdentity, id)
	}
	_, id, ok := wire.ParseWorkingListKey("working:queue:default:oldhost:77")
	require.True(t, ok, "the gem's legacy host:pid identities")
	require.Equal(t, "oldhost:77", id)
	_, _, ok = wire.ParseWorkingListKey("working:queue:default:host:1:abc:extra")
	require.False(t, ok)
	require.Equal(t, "reliable-fetcher-heartbeat-testhost-4242-0123456789ab", wire.ReliableHeartbeatKey(testIdentity))
}

// A success whose acknowledgement the server holds back (a durable job
// waiting for its row delete) is no orphan: its slot has moved on to the
// next job, but the own-list sweep must not put the finished job back in
// its queue, and its late acknowledgement must not make the slot forget
// the job it runs now.
func TestSweepKeepsJobsWhoseAcknowledgementIsHeldBack(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"reliable", "reliable-batch"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			b := reliableBundle(t, nil, nil)
			f := newReliable(t, b, mode)
			t.Cleanup(f.Close)
			var life *reliableLife
			var st *slotState
			var held func() map[string]map[string]int
			switch f := f.(type) {
			case *reliableFetch:
				life, st, held = f.life, f.slots[0], f.held
			case *reliableBatch:
				life, st, held = f.base.life, f.workers[0], f.held
			}
			halt(life)
			list := wire.WorkingListKey("default", testIdentity)
			var dropped int64
			life.dropped = func() int64 { return dropped }
			life.waitingSince = func() int64 { return 0 }
			life.sweepDelay = 0
			_, err := b.conn.Do("LPUSH", list, "finished", "running", "stray")
			require.NoError(t, err)

			done := []byte("finished")
			st.hold(list, done)
			u := Unit{Queue: "default", Raw: done, list: list, slot: st}
			u = f.(interface{ Defer(Unit) Unit }).Defer(u)
			st.hold(list, []byte("running")) // the slot's next job

			dropped = 1
			require.NoError(t, life.sweepOwn(false)) // first look
			require.NoError(t, life.sweepOwn(false)) // second look
			require.Equal(t, []string{"stray"}, b.queue(t, "default"))
			vals, err := redis.Strings(b.conn.Do("LRANGE", list, 0, -1))
			require.NoError(t, err)
			require.ElementsMatch(t, []string{"finished", "running"}, vals)

			require.NoError(t, f.Finish(u, nil)) // the late acknowledgement
			now := held()
			require.Equal(t, 1, now[list]["running"], "the slot still holds the job it runs")
			require.Zero(t, now[list]["finished"], "the acknowledged job is no longer held")
		})
	}
}
