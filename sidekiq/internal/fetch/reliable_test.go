package fetch

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/procstat"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/testlog"
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
		c.Format = contract.FixedFormat(wire.Version7)
		if mod != nil {
			mod(c)
		}
	})
}

// newReliable builds the reliable fetch.
func newReliable(t *testing.T, b *fetchBundle) *reliableFetch {
	t.Helper()
	f, err := NewReliable(context.Background(), b.cfg)
	require.NoError(t, err)
	return f.(*reliableFetch)
}

// finishWith makes every processed job a success, as the server does.
func (b *fetchBundle) finishWith(f func() Fetcher) {
	b.hook = func(u Unit) { f().Finish(u, nil) }
}

func (b *fetchBundle) keys(t *testing.T, pattern string) []string {
	t.Helper()
	keys, err := redis.Strings(b.conn.Do("KEYS", pattern))
	require.NoError(t, err)
	return keys
}

// inProgress returns the jobs in the test process's in-progress lists.
func (b *fetchBundle) inProgress(t *testing.T) []string {
	t.Helper()
	return redistest.InProgress(t, b.conn, testIdentity)
}

// push LPUSHes jobs to queue:name, as Sidekiq's client does.
func (b *fetchBundle) push(t *testing.T, name string, jobs ...string) {
	t.Helper()
	for _, j := range jobs {
		b.conn.Send("LPUSH", contract.QueueKey(name), j)
	}
	_, err := b.conn.Do("")
	require.NoError(t, err)
}

func jobIn(queue string, i int) string {
	return fmt.Sprintf(`{"class":"Job","args":[],"jid":"%s%d","queue":"%s"}`, queue, i, queue)
}

// Every job moves through an in-progress list and is processed exactly
// once, with one queue or several, strict or weighted, with LMOVE (Redis
// 6.2+) or RPOPLPUSH; no job's bytes pass through a script. At stop
// nothing is left behind: no list, no registry entry, no heartbeat.
func TestReliableProcessesEachJobOnceAndLeavesNothing(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		queues []wire.QueueWeight
		moveOK bool
	}{
		{"one queue", []wire.QueueWeight{{Name: "q0"}}, true},
		{"strict", []wire.QueueWeight{{Name: "q0"}, {Name: "q1"}, {Name: "q2"}}, true},
		{"weighted", []wire.QueueWeight{{Name: "q0", Weight: 3}, {Name: "q1", Weight: 2}, {Name: "q2", Weight: 1}}, true},
		{"RPOPLPUSH", []wire.QueueWeight{{Name: "q0"}, {Name: "q1"}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			qs := c.queues
			b := reliableBundle(t, nil, func(cfg *Config) {
				cfg.Concurrency = 20
				cfg.Order = NewOrder(qs, wire.Version7)
			})
			const n = 3000
			for i := 0; i < n; i++ {
				b.conn.Send("LPUSH", contract.QueueKey(qs[i%len(qs)].Name), jobIn(qs[i%len(qs)].Name, i))
			}
			_, err := b.conn.Do("")
			require.NoError(t, err)
			var f *reliableFetch
			b.finishWith(func() Fetcher { return f })
			f = newReliable(t, b)
			f.moveOK = c.moveOK
			f.queues.moveOK = c.moveOK
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
			require.Empty(t, b.keys(t, "working:*"), "the in-progress lists are empty")
			require.Empty(t, b.keys(t, "reliable-fetcher-heartbeat-*"), "the heartbeats are gone at stop")
			require.Empty(t, b.keys(t, contract.KeyWorkingLists))
			for _, other := range []string{"brpop", "blmpop", "evalsha", "eval"} {
				require.Zero(t, redistest.CommandCalls(t, b.conn, other), other)
			}
			if c.moveOK {
				require.Zero(t, redistest.CommandCalls(t, b.conn, "rpoplpush"))
				require.GreaterOrEqual(t, redistest.CommandCalls(t, b.conn, "ltrim"), n/2, "most acknowledgements by position")
			} else {
				require.Equal(t, 1, redistest.CommandCalls(t, b.conn, "lmove"), "the probe only")
			}
		})
	}
}

// With several queues in strict order, a job comes from the first
// non-empty queue; a job pushed to a queue ahead of the one being drained
// is taken next; an idle slot notices at once a job pushed to the last
// queue.
func TestReliableSeveralQueuesInStrictOrder(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, func(c *Config) {
		c.Concurrency = 1
		c.Order = NewOrder([]wire.QueueWeight{{Name: "high"}, {Name: "mid"}, {Name: "low"}}, wire.Version7)
		c.BlockSeconds = 60 // a job missed would wait a minute
	})
	var order []string
	var mu sync.Mutex
	var f *reliableFetch
	b.hook = func(u Unit) {
		mu.Lock()
		order = append(order, u.Queue+":"+string(u.Raw))
		mu.Unlock()
		if string(u.Raw) == "l1" {
			// While the low queue drains, a job arrives in the high one
			// (believed empty by now): its waker sees it before l2.
			b.push(t, "high", "h3")
			wait.For(t, "the high queue's waker", func() bool { return !f.queues.list[0].empty.Load() })
		}
		f.Finish(u, nil)
	}
	b.push(t, "low", "l1", "l2")
	b.push(t, "high", "h1", "h2")
	f = newReliable(t, b)
	b.start(t, f)
	t.Cleanup(f.Close)
	wait.For(t, "five jobs", func() bool { return b.processed() == 5 })
	mu.Lock()
	require.Equal(t, []string{"high:h1", "high:h2", "low:l1", "high:h3", "low:l2"}, order)
	mu.Unlock()
	// Idle now: a job on the last queue is picked up at once (a waker
	// blocked on every queue, and the idle slot's blocker on one).
	wait.For(t, "a waker blocked on every queue, and a blocker", func() bool {
		return redistest.BlockedIn(t, b.conn, "CLIENT", "blmove") == 4
	})
	b.push(t, "low", "l3")
	wait.For(t, "the job pushed to the last queue, by a waker or the blocker, not after a timeout", func() bool { return b.processed() == 6 })
	require.Empty(t, b.queue(t, "low"))
}

// Weighted queues: each job comes from a queue drawn by weight among the
// non-empty ones, as Sidekiq's per-fetch weighted shuffle picks it, so the
// queues drain in proportion to their weights while all have jobs, and
// an emptied queue's share goes to the others.
func TestReliableWeightedQueuesDrainByWeight(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, func(c *Config) {
		c.Concurrency = 8
		c.Order = NewOrder([]wire.QueueWeight{{Name: "heavy", Weight: 3}, {Name: "light", Weight: 1}, {Name: "tiny", Weight: 1}}, wire.Version7)
	})
	const n = 2000
	for i := range n {
		b.conn.Send("LPUSH", "queue:heavy", jobIn("heavy", i))
		b.conn.Send("LPUSH", "queue:light", jobIn("light", i))
	}
	b.conn.Send("LPUSH", "queue:tiny", jobIn("tiny", 0))
	_, err := b.conn.Do("")
	require.NoError(t, err)
	var mu sync.Mutex
	counts := map[string]int{}
	var f *reliableFetch
	b.hook = func(u Unit) {
		mu.Lock()
		counts[u.Queue]++
		mu.Unlock()
		f.Finish(u, nil)
	}
	f = newReliable(t, b)
	b.start(t, f)
	t.Cleanup(f.Close)
	wait.For(t, "a thousand jobs", func() bool { return b.processed() >= 1000 })
	b.quietNow()
	f.Wait()
	mu.Lock()
	defer mu.Unlock()
	// heavy's share of the two is 3/4; with about a thousand draws its
	// standard deviation is 0.014, and 0.06 is over four of them.
	share := float64(counts["heavy"]) / float64(counts["heavy"]+counts["light"])
	require.InDelta(t, 0.75, share, 0.06, "heavy:light = %v", counts)
	require.Equal(t, 1, counts["tiny"], "the tiny queue's one job ran early, its share then went to the others")
}

// A success is acknowledged by position (LTRIM of its list's oldest
// entry), without sending the job back: its cost does not grow with the
// payload.
func TestReliableAcknowledgementSendsNoPayload(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, func(c *Config) { c.Concurrency = 2 })
	big := `{"class":"Job","args":["` + strings.Repeat("x", 10000) + `"],"jid":"big","queue":"default"}`
	var f *reliableFetch
	b.finishWith(func() Fetcher { return f })
	f = newReliable(t, b)
	mon := b.rs.StartMonitor(t)
	b.start(t, f)
	t.Cleanup(f.Close)
	b.push(t, "default", big)
	wait.For(t, "the job processed", func() bool { return b.processed() == 1 })
	wait.For(t, "the in-progress list empty", func() bool { return len(b.inProgress(t)) == 0 })
	var carriers, names []string
	for _, l := range mon.Lines(t) {
		names = append(names, strings.Fields(l)[0])
		if strings.Contains(l, "xxxxxxxxxx") {
			carriers = append(carriers, strings.Fields(l)[0])
		}
	}
	require.Equal(t, []string{`"LPUSH"`}, carriers, "only the push sends the payload to Redis")
	require.Contains(t, names, `"LTRIM"`)
}

// A job is acknowledged by position only when it is the oldest of its
// list, its list identity is of the current epoch and the heartbeats are
// fresh; otherwise by value. A job acknowledged by value stays in its
// slot's mirror until its LREM has run: a newer job's LTRIM, sent on
// another connection, could otherwise run first and take out the older
// entry, leaving its own in the list.
func TestPositionalAcknowledgementsOnlyWhenCertain(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, nil)
	f := newReliable(t, b)
	t.Cleanup(f.Close)
	s := f.slots[0]
	sl := s.list(f.ids, f.queues.list[0])
	unit := func(raw string) Unit {
		return Unit{Queue: "default", Raw: []byte(raw), reliableUnit: reliableUnit{list: sl.key, held: s.moved(sl, []byte(raw)), slot: s}}
	}
	heldNow := func() []string {
		var out []string
		for _, h := range sl.held {
			out = append(out, string(h.raw))
		}
		return out
	}
	// given is a job fetched ahead and being given back (it leaves the
	// mirror once the requeue script has run), older the job that ran
	// meanwhile, newer the one behind it.
	given, older, newer := unit("given"), unit("older"), unit("newer")
	kOlder := f.ackOf(older)
	require.False(t, kOlder.byPos, "not the oldest: by value")
	require.Equal(t, []string{"given", "older", "newer"}, heldNow(), "in the mirror until its LREM has run")
	s.release(given.held) // the requeue script ran
	kNewer := f.ackOf(newer)
	require.False(t, kNewer.byPos, "the older job's LREM is in flight: by value, not a position that could take out its entry")
	kOlder.resolve()
	kNewer.resolve()
	require.Empty(t, heldNow())

	first, second, _ := unit("first"), unit("second"), unit("third")
	k := f.ackOf(first)
	require.True(t, k.byPos, "the oldest: by position")
	require.Equal(t, fmt.Sprintf("*4\r\n$5\r\nLTRIM\r\n$%d\r\n%s\r\n$1\r\n0\r\n$2\r\n-2\r\n", len(sl.key), sl.key), string(k.trimCmd))
	k2 := f.ackOf(second)
	require.True(t, k2.byPos, "behind a job whose LTRIM is on its way: positions commute")
	require.Equal(t, []string{"first", "second", "third"}, heldNow(), "no orphans for the sweep until the LTRIMs ran")
	k.resolve()
	require.Equal(t, []string{"second", "third"}, heldNow())
	// The first LTRIM's connection broke before its reply (the epoch
	// ends, it goes again by value): the second, not sent yet, goes by
	// value too, or it could take out the first's entry.
	f.ids.bump()
	pending := []ack{k2}
	recheck(f.ids, pending)
	require.False(t, pending[0].byPos, "a position decided before the epoch ended goes by value")

	u := unit("x")
	f.ids.bump()
	require.False(t, f.ackOf(u).byPos, "an identity of a past epoch: by value")
	next := s.list(f.ids, f.queues.list[0])
	require.NotEqual(t, sl.key, next.key, "the slot's next move goes to a list of a new identity")

	sl = next
	u = unit("y")
	f.ids.confirmed.Store(time.Now().Add(-time.Minute).UnixNano())
	f.ids.age()
	require.False(t, f.ackOf(u).byPos, "heartbeats not confirmed lately: by value")
}

// A renewal of the heartbeats that finds one gone (this process was taken
// for dead, or Redis lost its keys) ends the epoch: no position is trusted
// any more.
func TestRenewalFindingAHeartbeatGoneEndsTheEpoch(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, nil)
	var f *reliableFetch
	b.finishWith(func() Fetcher { return f })
	f = newReliable(t, b)
	b.start(t, f)
	t.Cleanup(f.Close)
	halt(f.life)
	b.push(t, "default", jobIn("default", 1))
	wait.For(t, "the job processed", func() bool { return b.processed() == 1 })
	hbs := b.keys(t, "reliable-fetcher-heartbeat-*")
	require.NotEmpty(t, hbs, "every list identity has the gem's heartbeat key")
	epoch := f.ids.epoch.Load()
	f.life.beat()
	require.Equal(t, epoch, f.ids.epoch.Load(), "every key in place")
	_, err := b.conn.Do("DEL", hbs[0])
	require.NoError(t, err)
	f.life.beat()
	require.Greater(t, f.ids.epoch.Load(), epoch)
}

// A failure's outcome is written only while the job is still in this
// process's list: once another process recovered it, writing a retry too
// would run it twice.
func TestReliableFinishWritesOnlyWhatItStillOwns(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, nil)
	f := newReliable(t, b)
	t.Cleanup(f.Close)
	list := contract.WorkingListKey("default", testIdentity+"000001")
	at := time.Unix(1795296600, 0)
	_, err := b.conn.Do("LPUSH", list, "owned")
	require.NoError(t, err)
	require.NoError(t, f.Finish(Unit{Queue: "default", Raw: []byte("owned"), reliableUnit: reliableUnit{list: list}},
		&Outcome{Set: contract.KeyRetry, At: at, Payload: []byte("owned-retry")}))
	require.NoError(t, f.Finish(Unit{Queue: "default", Raw: []byte("recovered"), reliableUnit: reliableUnit{list: list}},
		&Outcome{Set: contract.KeyRetry, At: at, Payload: []byte("recovered-retry")}))
	retries, err := redis.Strings(b.conn.Do("ZRANGE", contract.KeyRetry, 0, -1, "WITHSCORES"))
	require.NoError(t, err)
	require.Equal(t, []string{"owned-retry", "1795296600"}, retries)
	// A dead entry carries the dead set's trims.
	_, err = b.conn.Do("LPUSH", list, "poison")
	require.NoError(t, err)
	_, err = b.conn.Do("ZADD", contract.KeyDead, contract.Score(at.Add(-200*24*time.Hour)), "ancient")
	require.NoError(t, err)
	require.NoError(t, f.Finish(Unit{Queue: "default", Raw: []byte("poison"), reliableUnit: reliableUnit{list: list}},
		&Outcome{Set: contract.KeyDead, At: at, Payload: []byte("poison-dead")}))
	dead, err := redis.Strings(b.conn.Do("ZRANGE", contract.KeyDead, 0, -1))
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
	f := newReliable(t, b)
	t.Cleanup(f.Close)
	list := contract.WorkingListKey("default", testIdentity+"000001")
	_, err := b.conn.Do("LPUSH", list, "a", "b")
	require.NoError(t, err)
	b.push(t, "default", "newer")
	units := []Unit{{Queue: "default", Raw: []byte("a"), reliableUnit: reliableUnit{list: list}}, {Queue: "default", Raw: []byte("gone"), reliableUnit: reliableUnit{list: list}}, {Queue: "default", Raw: []byte("b"), reliableUnit: reliableUnit{list: list}}}
	require.NoError(t, f.Requeue(units))
	require.Equal(t, []string{"newer", "a", "b"}, b.queue(t, "default"), "requeued at the pop end, b popped first")
	require.Empty(t, b.keys(t, list))
}

// deadList writes the in-progress list of another process; registered,
// as gojob's are, or not, as the gem's are not.
func deadList(t *testing.T, b *fetchBundle, identity string, register bool, jobs ...string) string {
	t.Helper()
	list := contract.WorkingListKey("default", identity)
	for _, j := range jobs {
		// As the owner fetched them: the oldest at the tail.
		_, err := b.conn.Do("LPUSH", list, j)
		require.NoError(t, err)
	}
	if register {
		_, err := b.conn.Do("SADD", contract.KeyWorkingLists, list)
		require.NoError(t, err)
	}
	return list
}

func job(jid string) string {
	return `{"retry":true,"queue":"default","class":"Job","args":[],"jid":"` + jid + `","created_at":1795296573.0}`
}

// The jobs of a process that is gone go back to the pop end of their
// queue with their original bytes, oldest first, before the jobs pushed
// meanwhile; the list and its registry entry go away. The gem's lists,
// found by a SCAN, are recovered the same way. Live owners (either
// heartbeat present) are never touched.
func TestRecoveryPushesOrphansBackBeforeNewerJobs(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, nil)
	f := newReliable(t, b)
	t.Cleanup(f.Close)
	life := f.life
	halt(life)
	dead := deadList(t, b, "gone:1:aaaaaaaaaaaa000001", true, job("old"), job("young"))
	liveGLF := deadList(t, b, "ruby:2:bbbbbbbbbbbb", true, job("ruby-running"))
	_, err := b.conn.Do("SET", contract.ReliableHeartbeatKey("ruby:2:bbbbbbbbbbbb"), "1", "EX", 60)
	require.NoError(t, err)
	liveSidekiq := deadList(t, b, "go:3:cccccccccccc", true, job("go-running"))
	_, err = b.conn.Do("HSET", "go:3:cccccccccccc", "info", "{}")
	require.NoError(t, err)
	rubyGone := deadList(t, b, "ruby:4:dddddddddddd", false, job("ruby-old"), job("ruby-young"))
	b.push(t, "default", "newer")

	// The SCAN for the gem's lists is due (the pass at start took the
	// cluster-wide lease).
	life.lastScan = time.Time{}
	_, err = b.conn.Do("DEL", contract.KeyRecoveryScanLock)
	require.NoError(t, err)
	require.NoError(t, life.pass(nil))
	q := b.queue(t, "default")
	require.ElementsMatch(t, []string{"newer", job("young"), job("old"), job("ruby-young"), job("ruby-old")}, q)
	require.Equal(t, "newer", q[0])
	require.Less(t, indexOf(q, job("young")), indexOf(q, job("old")), "old is popped first")
	require.Less(t, indexOf(q, job("ruby-young")), indexOf(q, job("ruby-old")), "ruby-old is popped first")
	require.Empty(t, b.keys(t, dead))
	require.Empty(t, b.keys(t, rubyGone))
	registered, err := redis.Strings(b.conn.Do("SMEMBERS", contract.KeyWorkingLists))
	require.NoError(t, err)
	require.ElementsMatch(t, []string{liveGLF, liveSidekiq}, registered)
	n, err := redis.Int(b.conn.Do("LLEN", liveGLF))
	require.NoError(t, err)
	require.Equal(t, 1, n, "a list whose gem heartbeat lives is left alone")
	n, err = redis.Int(b.conn.Do("LLEN", liveSidekiq))
	require.NoError(t, err)
	require.Equal(t, 1, n, "a list whose Sidekiq process hash lives is left alone")
	count, err := redis.Int(b.conn.Do("GET", contract.RecoveryCountKey("old")))
	require.NoError(t, err)
	require.Equal(t, 1, count)
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
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
		f := newReliable(t, bi)
		t.Cleanup(f.Close)
		halt(f.life)
		lives = append(lives, f.life)
		b = bi
	}
	var jobs []string
	for i := range 300 {
		jobs = append(jobs, job(fmt.Sprintf("c%03d", i)))
	}
	list := deadList(t, b, "crashed:9:dddddddddddd", true, jobs...)
	var wg sync.WaitGroup
	for _, l := range lives {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := l.recoverList(list, false)
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
	f := newReliable(t, b)
	t.Cleanup(f.Close)
	life := f.life
	halt(life)
	_, err := b.conn.Do("SET", contract.RecoveryCountKey("pill"), 2)
	require.NoError(t, err)
	ruby := `{"retry":true,"queue":"default","class":"Job","args":[],"jid":"ruby-pill","interrupted_count":2}`
	deadList(t, b, "gone:1:aaaaaaaaaaaa", true, job("pill"), ruby, job("fine"))
	require.NoError(t, life.pass(nil))
	require.Equal(t, []string{job("fine")}, b.queue(t, "default"))
	dead, err := redis.Strings(b.conn.Do("ZRANGE", contract.KeyDead, 0, -1))
	require.NoError(t, err)
	require.Len(t, dead, 2)
	for _, d := range dead {
		j, err := wire.ParseJob([]byte(d))
		require.NoError(t, err)
		require.Equal(t, "Gojob::PoisonPill", j.ErrorClass())
		require.Contains(t, j.ErrorMessage(), "died 3 times")
		_, ok := j.Time("failed_at")
		require.True(t, ok)
	}
	require.Len(t, died, 2)
	require.Equal(t, int64(1), stats.Recovered.Load())
	require.Equal(t, int64(2), stats.PoisonPills.Load())
	require.Empty(t, b.keys(t, contract.RecoveryCountKey("pill")), "a buried job's count is dropped")
}

// On the same machine, a predecessor whose heartbeat has not expired yet
// is known to be gone when its pid is no longer the process that started
// then (a restarted container reusing this process's pid included); a
// process that still runs, and another server of this very process, are
// left alone.
func TestRecoveryTakesSameHostPredecessorsAtOnce(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, nil)
	f := newReliable(t, b)
	t.Cleanup(f.Close)
	life := f.life
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
		{fmt.Sprintf("h:%d:aaaaaaaaaaaa000001", os.Getpid()), "gojob " + boot + " 1", true},
		{fmt.Sprintf("h:%d:ffffffffffff000001", os.Getpid()), "gojob " + boot + " " + procstat.StartTime(os.Getpid()), false},
		{fmt.Sprintf("h:%d:bbbbbbbbbbbb000001", spid), "gojob " + boot + " " + procstat.StartTime(spid), false},
		{fmt.Sprintf("h:%d:cccccccccccc000001", spid), "gojob " + boot + " 99", true},
		{fmt.Sprintf("h:%d:dddddddddddd", spid), "gojob other-boot 99", false},
		{fmt.Sprintf("h:%d:eeeeeeeeeeee", spid), "1", false},
	}
	for _, c := range cases {
		list := deadList(t, b, c.identity, true, job(c.identity))
		_, err := b.conn.Do("SET", contract.ReliableHeartbeatKey(c.identity), c.hb, "EX", 60)
		require.NoError(t, err)
		require.NoError(t, life.pass(nil))
		n, err := redis.Int(b.conn.Do("LLEN", list))
		require.NoError(t, err)
		require.Equal(t, c.gone, n == 0, c.identity+" "+c.hb)
	}
}

// ownList gives slot s a list of the current epoch for queue:default, as
// its first move would, and returns it.
func ownList(f *reliableFetch, s *slotState) (*slotList, string) {
	sl := s.list(f.ids, f.queues.list[0])
	f.ids.mu.Lock()
	sl.ident.lists["queue:default"] = sl.key
	sl.registered = true
	sl.ident.created = true
	f.ids.mu.Unlock()
	return sl, sl.key
}

// A move whose reply was lost may have put a job in a list that no slot
// holds; the sweep of the own lists puts it back after two looks, and
// never touches a job a slot holds.
func TestSweepRequeuesOwnJobsNoSlotHolds(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, nil)
	f := newReliable(t, b)
	t.Cleanup(f.Close)
	life := f.life
	halt(life)
	sl, list := ownList(f, f.slots[0])
	f.slots[0].moved(sl, []byte("running"))
	var dropped int64
	life.dropped = func() int64 { return dropped }
	life.waitingSince = func() int64 { return 0 }
	life.sweepDelay = 0
	_, err := b.conn.Do("LPUSH", list, "running", "stray")
	require.NoError(t, err)
	require.NoError(t, life.sweepOwn(false))
	require.Empty(t, b.queue(t, "default"), "nothing without a failed round trip")
	dropped = 1
	require.NoError(t, life.sweepOwn(false)) // first look
	require.Empty(t, b.queue(t, "default"))
	require.NoError(t, life.sweepOwn(false)) // second look
	require.Equal(t, []string{"stray"}, b.queue(t, "default"))
	vals, err := redis.Strings(b.conn.Do("LRANGE", list, 0, -1))
	require.NoError(t, err)
	require.Equal(t, []string{"running"}, vals)
}

// The identities of past epochs go once no slot uses them and their lists
// are empty: their heartbeats are deleted and their lists leave the
// registry.
func TestSweepRetiresIdentitiesOfPastEpochs(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, nil)
	f := newReliable(t, b)
	t.Cleanup(f.Close)
	life := f.life
	halt(life)
	s := f.slots[0]
	sl, list := ownList(f, s)
	li := sl.ident
	h := s.moved(sl, []byte("running"))
	_, err := b.conn.Do("LPUSH", list, "running")
	require.NoError(t, err)
	b.conn.Send("SET", li.hbKey, "x")
	b.conn.Send("SADD", contract.KeyWorkingLists, list)
	_, err = b.conn.Do("")
	require.NoError(t, err)
	f.ids.bump()
	s.identity(f.ids) // the slot's next move: a new identity
	require.NoError(t, life.sweepOwn(false))
	require.Len(t, b.keys(t, li.hbKey), 1, "still holding a job")
	s.release(h)
	_, err = b.conn.Do("LTRIM", list, 1, 0)
	require.NoError(t, err)
	require.NoError(t, life.sweepOwn(false))
	require.Empty(t, b.keys(t, li.hbKey))
	registered, err := redis.Strings(b.conn.Do("SMEMBERS", contract.KeyWorkingLists))
	require.NoError(t, err)
	require.NotContains(t, registered, list)
	require.NotContains(t, f.ids.snapshot(), li)
}

// The keys are the gitlab-sidekiq-fetcher gem's, which its own regexes
// parse (queue names may hold colons), list identities included.
func TestWorkingListKeysParseAsTheGemDoes(t *testing.T) {
	t.Parallel()
	ids := newIdents(testIdentity)
	li := ids.create()
	for _, q := range []string{"default", "namespace:deeper:assigned"} {
		key := li.listKey(contract.QueueKey(q))
		require.Equal(t, "working:queue:"+q+":"+testIdentity+"000001", key)
		gotQ, id, ok := contract.ParseWorkingListKey(key)
		require.True(t, ok)
		require.Equal(t, q, gotQ)
		require.Equal(t, li.id, id)
	}
	_, id, ok := contract.ParseWorkingListKey("working:queue:default:oldhost:77")
	require.True(t, ok, "the gem's legacy host:pid identities")
	require.Equal(t, "oldhost:77", id)
	_, _, ok = contract.ParseWorkingListKey("working:queue:default:host:1:abc:extra")
	require.False(t, ok)
	require.Equal(t, "reliable-fetcher-heartbeat-testhost-4242-0123456789ab000001", li.hbKey)
}

// A success whose acknowledgement the server holds back (a durable job
// waiting for its row delete) is no orphan: its slot has moved on to the
// next job, but the own-list sweep must not put the finished job back in
// its queue, and its late acknowledgement must not make the slot forget
// the job it runs now.
func TestSweepKeepsJobsWhoseAcknowledgementIsHeldBack(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, nil)
	f := newReliable(t, b)
	t.Cleanup(f.Close)
	life, st := f.life, f.slots[0]
	halt(life)
	sl, list := ownList(f, st)
	var dropped int64
	life.dropped = func() int64 { return dropped }
	life.waitingSince = func() int64 { return 0 }
	life.sweepDelay = 0
	_, err := b.conn.Do("LPUSH", list, "finished", "running", "stray")
	require.NoError(t, err)

	u := Unit{Queue: "default", Raw: []byte("finished"), reliableUnit: reliableUnit{list: list, held: st.moved(sl, []byte("finished")), slot: st}}
	u = f.Defer(u)
	st.moved(sl, []byte("running")) // the slot's next job

	dropped = 1
	require.NoError(t, life.sweepOwn(false)) // first look
	require.NoError(t, life.sweepOwn(false)) // second look
	require.Equal(t, []string{"stray"}, b.queue(t, "default"))
	vals, err := redis.Strings(b.conn.Do("LRANGE", list, 0, -1))
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"finished", "running"}, vals)

	require.NoError(t, f.Finish(u, nil)) // the late acknowledgement
	require.Equal(t, 1, f.held()[list]["finished"], "held until its acknowledgement has run")
	f.acker.send(f.acker.take(nil, ackBatch))
	t.Cleanup(f.acker.fc.close)
	now := f.held()
	require.Equal(t, 1, now[list]["running"], "the slot still holds the job it runs")
	require.Zero(t, now[list]["finished"], "the acknowledged job is no longer held")
	vals, err = redis.Strings(b.conn.Do("LRANGE", list, 0, -1))
	require.NoError(t, err)
	require.Equal(t, []string{"running"}, vals)
}

// A paused queue's waker does not wake the takers for jobs they may not
// take, and the paused queue keeps its jobs.
func TestReliablePausedQueueKeepsItsJobsAndWakesNobody(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, func(c *Config) {
		c.Concurrency = 2
		c.Order = NewOrder([]wire.QueueWeight{{Name: "open"}, {Name: "held"}}, wire.Version7)
	})
	b.cfg.Order.SetPaused([]string{"held"})
	var f *reliableFetch
	b.finishWith(func() Fetcher { return f })
	f = newReliable(t, b)
	b.start(t, f)
	t.Cleanup(f.Close)
	b.push(t, "held", "h1")
	b.push(t, "open", "o1")
	wait.For(t, "the open queue's job", func() bool { return b.processed() == 1 })
	before := redistest.CommandCalls(t, b.conn, "lmove")
	time.Sleep(300 * time.Millisecond)
	after := redistest.CommandCalls(t, b.conn, "lmove")
	require.LessOrEqual(t, after-before, 2, "no move spins on the paused queue")
	require.Equal(t, []string{"h1"}, b.queue(t, "held"))
	b.cfg.Order.SetPaused(nil)
	wait.For(t, "the resumed queue's job", func() bool { return b.processed() == 2 })
}

// Redis refusing writes for a while (NOREPLICAS here; READONLY after a
// failover and LOADING after a restart are the same to the fetch) loses
// nothing and runs nothing twice: every reply of a round is read whatever
// some of them say, so the next round reads its own replies, and a
// refused acknowledgement goes again.
func TestReliableRidesOutRefusedWrites(t *testing.T) {
	t.Parallel()
	qs := []wire.QueueWeight{{Name: "q0", Weight: 3}, {Name: "q1", Weight: 2}, {Name: "q2", Weight: 1}}
	logs := testlog.New(t)
	b := reliableBundle(t, nil, func(cfg *Config) {
		cfg.Concurrency = 8
		cfg.Order = NewOrder(qs, wire.Version7)
		cfg.Logger = logs.Logger()
	})
	const n = 3000
	for i := 0; i < n; i++ {
		b.conn.Send("LPUSH", contract.QueueKey(qs[i%len(qs)].Name), jobIn(qs[i%len(qs)].Name, i))
	}
	_, err := b.conn.Do("")
	require.NoError(t, err)
	var f *reliableFetch
	b.hook = func(u Unit) {
		time.Sleep(200 * time.Microsecond)
		f.Finish(u, nil)
	}
	f = newReliable(t, b)
	f.Start()
	for round := range 3 {
		wait.For(t, "some jobs processed", func() bool { return b.processed() >= (round+1)*n/5 })
		_, err = b.conn.Do("CONFIG", "SET", "min-replicas-to-write", 1)
		require.NoError(t, err)
		time.Sleep(300 * time.Millisecond)
		_, err = b.conn.Do("CONFIG", "SET", "min-replicas-to-write", 0)
		require.NoError(t, err)
	}
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
	require.Empty(t, b.keys(t, "working:*"), "the in-progress lists are empty")
	require.NotContains(t, logs.String(), "no longer in this process's in-progress list")
	require.NotContains(t, logs.String(), "no slot runs")
}

// A process's first passes read the registry only: the SCAN for the gem's
// unregistered lists, whose cost grows with the keyspace, waits
// firstScanAfter, so that start-up costs the same whatever Redis holds.
func TestFirstPassesDoNotScanTheKeyspace(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, nil)
	f := newReliable(t, b)
	t.Cleanup(f.Close)
	life := f.life
	halt(life)
	registered := deadList(t, b, "gone:1:aaaaaaaaaaaa000001", true, job("registered"))
	unregistered := deadList(t, b, "ruby:4:dddddddddddd", false, job("ruby-old"))
	require.NoError(t, life.pass(nil))
	require.Equal(t, []string{job("registered")}, b.queue(t, "default"))
	require.Empty(t, b.keys(t, registered))
	require.NotEmpty(t, b.keys(t, unregistered), "no SCAN yet")
	require.Zero(t, redistest.CommandCalls(t, b.conn, "scan"))

	life.lastScan = time.Now().Add(-scanInterval) // firstScanAfter has passed
	require.NoError(t, life.pass(nil))
	require.Empty(t, b.keys(t, unregistered))
	require.ElementsMatch(t, []string{job("registered"), job("ruby-old")}, b.queue(t, "default"))
}
