package fetch

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/testlog"
	"github.com/gojob/gojob/internal/wait"
)

// A finished job leaves its in-progress list even when no round follows to
// carry its acknowledgement: with the queue empty every taker is parked,
// and the acknowledger sends after rideHold.
func TestReliableFetchAcknowledgesWhileEveryTakerIsParked(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, func(c *Config) {
		c.Concurrency = 8
		c.BlockSeconds = 60 // no round comes for a minute
	})
	for i := range 5 {
		_, err := b.conn.Do("LPUSH", "queue:default", fmt.Sprintf(`{"class":"Job","args":[],"jid":"j%d","queue":"default"}`, i))
		require.NoError(t, err)
	}
	var f Fetcher
	// Each job finishes after the takers have found the queue empty: no
	// round is coming to carry its acknowledgement.
	b.hook = func(u Unit) {
		time.Sleep(100 * time.Millisecond)
		f.Finish(u, nil)
	}
	f = newReliable(t, b)
	f.Start()
	wait.For(t, "every job taken", func() bool { return b.processed() >= 5 })
	require.NotEmpty(t, b.inProgress(t), "the jobs are in the in-progress lists")
	wait.For(t, "the in-progress lists empty: the acknowledgements did not wait for a round", func() bool { return len(b.inProgress(t)) == 0 })
	b.quietNow()
	f.Wait()
	f.Close()
}

// Under load most acknowledgements ride in the takers' rounds: Redis reads
// fewer writes from gojob than when the acknowledger sends them all.
func TestReliableFetchAcknowledgementsRideInRounds(t *testing.T) {
	t.Parallel()
	const n = 3000
	drain := func(t *testing.T, ride bool) int {
		b := reliableBundle(t, nil, func(c *Config) { c.Concurrency = 10 })
		for i := range n {
			b.conn.Send("LPUSH", "queue:default", fmt.Sprintf(`{"class":"Job","args":[],"jid":"j%d","queue":"default"}`, i))
		}
		_, err := b.conn.Do("")
		require.NoError(t, err)
		var f *reliableFetch
		b.finishWith(func() Fetcher { return f })
		f = newReliable(t, b)
		if !ride {
			f.acker.hold = 0
		}
		before := readsProcessed(t, b.conn)
		f.Start()
		wait.For(t, "every job processed", func() bool { return b.processed() >= n })
		reads := readsProcessed(t, b.conn) - before
		b.quietNow()
		f.Wait()
		f.Close()
		require.Empty(t, b.keys(t, "working:*"), "every job was acknowledged")
		return reads
	}
	riding, alone := drain(t, true), drain(t, false)
	t.Logf("reads from clients for %d jobs: %d with acknowledgements riding, %d without", n, riding, alone)
	require.Less(t, float64(riding), 0.9*float64(alone))
}

// readsProcessed is Redis's count of reads from client sockets.
func readsProcessed(t *testing.T, c redis.Conn) int {
	t.Helper()
	info, err := redis.String(c.Do("INFO", "stats"))
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\r\n") {
		var n int
		if _, err := fmt.Sscanf(line, "total_reads_processed:%d", &n); err == nil {
			return n
		}
	}
	t.Fatal("INFO stats has no total_reads_processed")
	return 0
}

// A taker that takes queued acknowledgements into its round inherits their
// age: the own-list sweep, which leaves the lists alone while a reply from
// before its first look is outstanding, keeps seeing them as on their way.
func TestStolenAcknowledgementsKeepTheirAge(t *testing.T) {
	t.Parallel()
	a := newAcker(&Config{}, nil)
	a.hold = time.Hour
	a.add(ack{list: "l", raw: []byte("x")})
	queuedAt := a.waitingSince()
	require.NotZero(t, queuedAt)
	var taking atomic.Int64
	taking.Store(time.Now().Add(time.Second).UnixNano())
	got := a.steal(nil, 10, &taking)
	require.Len(t, got, 1)
	require.Equal(t, queuedAt, taking.Load())
	require.Zero(t, a.waitingSince(), "nothing is left queued")
}

// An acknowledgement sent again after its first connection broke goes by
// value, whatever it was, and may find its job already gone (the first
// send reached Redis): that is not another process's recovery and is not
// reported as one. A first send by value that finds the job gone is.
func TestResentAcknowledgementGoesByValueAndFindingNothingIsNotARecovery(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	logs := testlog.New(t)
	b := reliableBundle(t, rs, func(c *Config) { c.Logger = logs.Logger() })
	f := newReliable(t, b)
	t.Cleanup(f.Close)
	list := "working:queue:default:" + testIdentity + "000001"
	_, err := b.conn.Do("LPUSH", list, "kept", "done")
	require.NoError(t, err)
	// A position resent would take out whatever is oldest now ("kept"):
	// resent, it goes by value.
	f.acker.resend([]ack{{list: list, raw: []byte("done"), byPos: true}})
	vals, err := redis.Strings(b.conn.Do("LRANGE", list, 0, -1))
	require.NoError(t, err)
	require.Equal(t, []string{"kept"}, vals)
	f.acker.resend([]ack{{list: list, raw: []byte("gone")}})
	require.Zero(t, logs.Count("warn", "another process recovered it"))
	require.NoError(t, f.acker.sendByValue([]ack{{list: list, raw: []byte("gone")}}))
	require.Equal(t, 1, logs.Count("warn", "another process recovered it"))
}

// Acknowledgements queued together wake the acknowledger once and are
// taken in one batch, in their order.
func TestAcknowledgementsQueuedTogetherAreTakenInOneBatch(t *testing.T) {
	a := newAcker(&Config{}, nil)
	acks := []ack{{raw: []byte("a")}, {raw: []byte("b")}, {raw: []byte("c")}}
	require.NoError(t, a.addMany(acks))
	require.NoError(t, a.addMany(acks[:1]))
	require.Len(t, a.kick, 1, "one wake-up")
	got := a.take(nil, ackBatch)
	require.Len(t, got, 4)
	for i, raw := range []string{"a", "b", "c", "a"} {
		require.Equal(t, raw, string(got[i].raw))
	}
}

// An acknowledgement queued after a taker stole the ones before it is left
// to the takers for its own hold, not sent when the hold of the stolen ones
// ends: the acknowledger would otherwise send, a moment after each steal,
// what the next round was about to carry (a round trip of its own for a job
// or two).
func TestAcknowledgementQueuedAfterAStealIsHeldForItsOwnHold(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, nil)
	const hold = 400 * time.Millisecond
	f := newReliable(t, b)
	t.Cleanup(f.Close)
	a := newAcker(b.cfg, f.acker.f)
	a.hold = hold
	list := "working:queue:default:" + testIdentity + "000001"
	first := ack{list: list, raw: []byte(`{"jid":"first"}`)}
	second := ack{list: list, raw: []byte(`{"jid":"second"}`)}
	_, err := b.conn.Do("LPUSH", list, second.raw)
	require.NoError(t, err)
	a.start()
	defer a.close()

	require.NoError(t, a.add(first))
	var taking atomic.Int64
	require.Len(t, a.steal(nil, rideMax, &taking), 1, "a round carries the first")
	time.Sleep(hold / 2)
	queued := time.Now()
	require.NoError(t, a.add(second))
	wait.For(t, "the second acknowledged", func() bool {
		n, err := redis.Int(b.conn.Do("LLEN", list))
		require.NoError(t, err)
		return n == 0
	})
	// A slow machine only makes this later.
	require.GreaterOrEqual(t, time.Since(queued), hold-hold/8,
		"the acknowledger sent it before its own hold ended")
}

// A backlog of acknowledgements is taken in batches in its order, while
// more are added, without moving the ones left at each take (a backlog
// made the acknowledger's CPU grow with its square) and reusing the room
// taken.
func TestAcknowledgementBacklogIsTakenInOrder(t *testing.T) {
	t.Parallel()
	a := newAcker(&Config{}, nil)
	a.hold = time.Hour // not started: only this test takes
	added, taken := 0, 0
	add := func(n int) {
		batch := make([]ack, n)
		for i := range batch {
			batch[i] = ack{list: "l", raw: []byte(strconv.Itoa(added))}
			added++
		}
		require.NoError(t, a.addMany(batch))
	}
	add(3 * ackBatch)
	var buf []ack
	for round := range 50 {
		add(ackBatch + round%7)
		buf = a.take(buf[:0], ackBatch)
		require.Len(t, buf, ackBatch)
		for _, k := range buf {
			require.Equal(t, strconv.Itoa(taken), string(k.raw))
			taken++
		}
		a.mu.Lock()
		pending, room := a.queued.len(), cap(a.queued.items)
		a.mu.Unlock()
		require.Equal(t, added-taken, pending)
		require.LessOrEqual(t, room, 8*ackBatch, "the taken room is reused")
	}
	for a.waitingSince() != 0 {
		for _, k := range a.take(buf[:0], ackBatch) {
			require.Equal(t, strconv.Itoa(taken), string(k.raw))
			taken++
		}
	}
	require.Equal(t, added, taken)
}
