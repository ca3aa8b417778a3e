package fetch

import (
	"fmt"
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

// A finished job leaves the in-progress list even when no fetch follows to
// carry its acknowledgement: with the queue empty every fetch blocks in
// BLMOVE (for Timeout seconds), and the acknowledger sends after rideHold.
func TestReliableFetchAcknowledgesWhileEveryFetchBlocks(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"reliable", "reliable-batch"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			b := reliableBundle(t, nil, func(c *Config) { c.Concurrency = 8 })
			for i := range 5 {
				_, err := b.conn.Do("LPUSH", "queue:default", fmt.Sprintf(`{"class":"Job","args":[],"jid":"j%d","queue":"default"}`, i))
				require.NoError(t, err)
			}
			var f Fetcher
			// Each job finishes after the fetches have found the queue
			// empty and blocked: no fetch is coming to carry its
			// acknowledgement.
			b.hook = func(u Unit) {
				time.Sleep(100 * time.Millisecond)
				f.Finish(u, nil)
			}
			f = newReliable(t, b, mode)
			f.Start()
			wait.For(t, "every job taken", func() bool { return b.processed() >= 5 })
			require.Len(t, b.keys(t, "working:queue:default:*"), 1, "the jobs are in the in-progress list")
			start := time.Now()
			wait.For(t, "the in-progress list gone", func() bool { return len(b.keys(t, "working:queue:default:*")) == 0 })
			require.Less(t, time.Since(start), Timeout*time.Second/2,
				"the acknowledgements did not wait for a blocked fetch to return")
			b.quietNow()
			f.Wait()
			f.Close()
		})
	}
}

// Under load most acknowledgements ride in the fetches' writes (the batched
// fetch's takes, the pipelined fetch's rounds): Redis reads fewer writes
// from gojob than when the acknowledger sends them all.
func TestReliableFetchAcknowledgementsRideInFetches(t *testing.T) {
	t.Parallel()
	const n = 3000
	drain := func(t *testing.T, mode string, ride bool) int {
		b := reliableBundle(t, nil, func(c *Config) { c.Concurrency = 10 })
		for i := range n {
			b.conn.Send("LPUSH", "queue:default", fmt.Sprintf(`{"class":"Job","args":[],"jid":"j%d","queue":"default"}`, i))
		}
		_, err := b.conn.Do("")
		require.NoError(t, err)
		var f Fetcher
		b.finishWith(func() Fetcher { return f })
		f = newReliable(t, b, mode)
		if !ride {
			switch f := f.(type) {
			case *reliableBatch:
				f.acker.hold = 0
			case *reliableFetch:
				f.acker.hold = 0
				f.pipes.acker = nil
			}
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
	for _, mode := range []string{"reliable", "reliable-batch"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			riding, alone := drain(t, mode, true), drain(t, mode, false)
			t.Logf("reads from clients for %d jobs: %d with acknowledgements riding, %d without", n, riding, alone)
			require.Less(t, float64(riding), 0.9*float64(alone))
		})
	}
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

// A fetcher that takes queued acknowledgements into its write inherits
// their age: the own-list sweep, which leaves lists alone while a reply
// from before its first look is outstanding, keeps seeing them as on their
// way.
func TestStolenAcknowledgementsKeepTheirAge(t *testing.T) {
	t.Parallel()
	a := newAcker(&Config{}, nil)
	a.hold = time.Hour
	a.add(Unit{Raw: []byte("x"), list: "l"})
	queuedAt := a.waitingSince()
	require.NotZero(t, queuedAt)
	var taking atomic.Int64
	taking.Store(time.Now().Add(time.Second).UnixNano())
	got := a.steal(nil, 10, &taking)
	require.Len(t, got, 1)
	require.Equal(t, queuedAt, taking.Load())
	require.Zero(t, a.waitingSince(), "nothing is left queued")
}

// An acknowledgement sent again after its first connection broke may find
// its job already gone (the first send reached Redis): that is not another
// process's recovery and is not reported as one. A first send that finds
// the job gone is.
func TestResentAcknowledgementFindingNothingIsNotARecovery(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	logs := testlog.New(t)
	b := reliableBundle(t, rs, func(c *Config) { c.Logger = logs.Logger() })
	life := &reliableLife{cfg: b.cfg}
	a := newAcker(b.cfg, life)
	u := Unit{Queue: "default", Raw: []byte(`{"jid":"gone"}`), list: "working:queue:default:" + testIdentity}
	a.resend([]Unit{u})
	require.Zero(t, logs.Count("warn", "another process recovered it"))
	require.NoError(t, a.send([]Unit{u}))
	require.Equal(t, 1, logs.Count("warn", "another process recovered it"))
}

// Acknowledgements queued together wake the acknowledger once and are
// taken in one batch, in their order.
func TestAcknowledgementsQueuedTogetherAreTakenInOneBatch(t *testing.T) {
	a := newAcker(&Config{}, nil)
	units := []Unit{{Raw: []byte("a")}, {Raw: []byte("b")}, {Raw: []byte("c")}}
	require.NoError(t, a.addMany(units))
	require.NoError(t, a.addMany(units[:1]))
	require.Len(t, a.kick, 1, "one wake-up")
	got := a.take(nil, ackBatch)
	require.Len(t, got, 4)
	for i, raw := range []string{"a", "b", "c", "a"} {
		require.Equal(t, raw, string(got[i].Raw))
	}
}

// An acknowledgement queued after a fetcher stole the ones before it is
// left to the fetchers for its own hold, not sent when the hold of the
// stolen ones ends: the acknowledger would otherwise send, a moment after
// each steal, what the next take was about to carry (a round trip of its
// own for a job or two).
func TestAcknowledgementQueuedAfterAStealIsHeldForItsOwnHold(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, nil)
	const hold = 400 * time.Millisecond
	a := newAcker(b.cfg, &reliableLife{cfg: b.cfg})
	a.hold = hold
	list := "working:queue:default:" + testIdentity
	first := Unit{Queue: "default", Raw: []byte(`{"jid":"first"}`), list: list}
	second := Unit{Queue: "default", Raw: []byte(`{"jid":"second"}`), list: list}
	_, err := b.conn.Do("LPUSH", list, second.Raw)
	require.NoError(t, err)
	a.start()
	defer a.close()

	require.NoError(t, a.add(first))
	var taking atomic.Int64
	require.Len(t, a.steal(nil, rideMax, &taking), 1, "a take carries the first")
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
