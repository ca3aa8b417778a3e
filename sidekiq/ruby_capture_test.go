package sidekiq

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/internal/clocktest"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/rubyfixtures"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// What gojob writes, compared byte for byte with what Ruby Sidekiq 7.3.10
// and 8.1.7 wrote in testdata/ruby-fixtures/<version> (captured): the
// client's pushes, the poller's push, the retry and dead entries. Each case
// gives gojob the captured jid and the captured clock readings.

// capturedVersions are the releases captured in testdata/ruby-fixtures
// whose writers gojob is compared with, and the version gojob writes for
// each.
var capturedVersions = []struct {
	dir string
	v   wire.Version
}{{"7.3.10", wire.Version7}, {"8.1.7", wire.Version8}}

// capturedTimes reads the epoch-second fields of a captured payload as the
// clock readings that made them.
func capturedTimes(t *testing.T, raw []byte, fields ...string) *clocktest.Sequence {
	t.Helper()
	j, err := wire.ParseJob(raw)
	require.NoError(t, err)
	var times []time.Time
	for _, f := range fields {
		ts, ok := j.Time(f)
		require.True(t, ok, f)
		times = append(times, ts)
	}
	return clocktest.NewSequence(times...)
}

func capturedJID(t *testing.T, raw []byte) string {
	t.Helper()
	j, err := wire.ParseJob(raw)
	require.NoError(t, err)
	return j.JID()
}

func TestClientPushesAsRubyDid(t *testing.T) {
	t.Parallel()
	for _, cv := range capturedVersions {
		t.Run(cv.dir, func(t *testing.T) {
			t.Parallel()
			clientPushesAsRubyDid(t, cv.dir, cv.v)
		})
	}
}

func clientPushesAsRubyDid(t *testing.T, dir string, v wire.Version) {
	pool := redistest.Start(t).Pool(t)
	ctx := context.Background()
	client := func(clk clock.Clock) *Client {
		c, err := NewClient(&ClientConfig{Pool: pool, Version: v, Clock: clk})
		require.NoError(t, err)
		return c
	}
	mustJob := func(j *wire.Job, err error) *wire.Job {
		require.NoError(t, err)
		return j
	}
	cases := []struct {
		file  string
		job   func() *wire.Job
		clock []string
		opts  func(t *testing.T, e rubyfixtures.Entry) *PushOpts
	}{
		{"client_perform_async.json", func() *wire.Job {
			// RecJob.perform_async(1, "two", {"three" => 3.5}); Enqueue's item.
			return mustJob(performAsyncJob("RecJob", 1, "two", map[string]any{"three": 3.5}))
		}, []string{"created_at", "enqueued_at"}, nil},
		{"client_push_retry_tags.json", func() *wire.Job {
			j := mustJob(wire.NewJob("RecJob", 1))
			j.Set("retry", rubyjson.IntValue(3))
			j.Set("tags", rubyjson.ArrayValue(rubyjson.StringValue("alpha"), rubyjson.StringValue("beta")))
			return j
		}, []string{"created_at", "enqueued_at"}, nil},
		{"client_perform_in.json", func() *wire.Job {
			return mustJob(wire.NewJob("RecJob", "in60"))
		}, []string{"created_at"}, func(t *testing.T, e rubyfixtures.Entry) *PushOpts {
			at, err := contract.ParseScore(e.Redis.Score)
			require.NoError(t, err)
			return &PushOpts{At: contract.FromEpochSeconds(at)}
		}},
		{"client_perform_at.json", func() *wire.Job {
			return mustJob(wire.NewJob("RecJob", "at120"))
		}, []string{"created_at"}, func(t *testing.T, e rubyfixtures.Entry) *PushOpts {
			at, err := contract.ParseScore(e.Redis.Score)
			require.NoError(t, err)
			return &PushOpts{At: contract.FromEpochSeconds(at)}
		}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			raw := rubyfixtures.Read(t, dir, c.file)
			j := c.job()
			j.Set("jid", rubyjson.StringValue(capturedJID(t, raw)))
			var opts *PushOpts
			if c.opts != nil {
				opts = c.opts(t, rubyfixtures.Find(t, dir, c.file))
			}
			res, err := client(capturedTimes(t, raw, c.clock...)).Push(ctx, j, opts)
			require.NoError(t, err)
			require.Equal(t, string(raw), string(res.Payload))
		})
	}

	// Sidekiq::Client.push_bulk("class" => RecJob, "args" => [[1], [2], [3]]):
	// one created_at for all, one enqueued_at per round trip.
	var want []string
	var jobs []*wire.Job
	for i := range 3 {
		raw := rubyfixtures.Read(t, dir, fmt.Sprintf("client_push_bulk_%d.json", i))
		want = append(want, string(raw))
		j := mustJob(wire.NewJob("RecJob", i+1))
		j.Set("jid", rubyjson.StringValue(capturedJID(t, raw)))
		jobs = append(jobs, j)
	}
	_, err := client(capturedTimes(t, []byte(want[0]), "created_at", "enqueued_at")).PushBulk(ctx, jobs, nil)
	require.NoError(t, err)
	for i, j := range jobs {
		require.Equal(t, want[i], string(j.Bytes()))
	}
}

// The poller moves a due scheduled job with a new enqueued_at at the end,
// as Ruby's poller did.
func TestPollerPushAsRubyDid(t *testing.T) {
	t.Parallel()
	for _, cv := range capturedVersions {
		t.Run(cv.dir, func(t *testing.T) {
			t.Parallel()
			pollerPushAsRubyDid(t, cv.dir, cv.v)
		})
	}
}

func pollerPushAsRubyDid(t *testing.T, dir string, v wire.Version) {
	raw := rubyfixtures.Read(t, dir, "poller_enqueued.json")
	j, err := wire.ParseJob(raw)
	require.NoError(t, err)
	enq, _ := j.Time("enqueued_at")
	j.Delete("enqueued_at") // the schedule member Ruby's poller popped
	member, err := wire.ParseJob(j.Bytes())
	require.NoError(t, err)
	c, err := NewClient(&ClientConfig{Pool: redistest.Start(t).Pool(t), Version: v, Clock: clocktest.NewSequence(enq)})
	require.NoError(t, err)
	res, err := c.Push(context.Background(), member, &PushOpts{Repush: true})
	require.NoError(t, err)
	require.Equal(t, string(raw), string(res.Payload))
}

// rubyError is a failure as a Ruby job raises it: a class, a message, a
// backtrace.
type rubyError struct {
	class, msg string
	frames     []string
}

func (e *rubyError) Error() string        { return e.msg }
func (e *rubyError) ErrorClass() string   { return e.class }
func (e *rubyError) StackTrace() []string { return e.frames }

// capturedOriginal is the payload a captured retry or dead entry was made
// from: its keys up to enqueued_at.
func capturedOriginal(t *testing.T, entry []byte) []byte {
	t.Helper()
	m, err := rubyjson.ParseObject(entry)
	require.NoError(t, err)
	out := rubyjson.NewMap()
	for i := range m.Len() {
		k, v := m.At(i)
		out.Set(k, v)
		if k == "enqueued_at" {
			break
		}
	}
	return out.Encode()
}

// A first failure of BtFailJob (retry: 2, backtrace: true) and of DieJob
// (retry: 0) gives the captured retry and dead entries: the same JSON byte
// for byte but for the zlib bytes of error_backtrace (another deflate
// implementation), which decode to the same frames; the retry score is
// failed_at + 15 + jitter (5 in the 7.3.10 capture, 1 in the 8.1.7 one).
func TestFailuresWriteRubysEntries(t *testing.T) {
	t.Parallel()
	for _, cv := range capturedVersions {
		t.Run(cv.dir, func(t *testing.T) {
			t.Parallel()
			failuresWriteRubysEntries(t, cv.dir, cv.v, map[string]int{"7.3.10": 5, "8.1.7": 1}[cv.dir])
		})
	}
}

func failuresWriteRubysEntries(t *testing.T, dir string, v wire.Version, jitter int) {
	s := planServer(v)
	retryRaw := rubyfixtures.Read(t, dir, "retry_backtrace_true.json")
	want, err := wire.ParseJob(retryRaw)
	require.NoError(t, err)
	frames, err := want.ErrorBacktrace()
	require.NoError(t, err)
	failedAt, _ := want.Time("failed_at")
	reg := &registration{opts: HandlerOptions{Retry: 2}}
	failure := &rubyError{class: "ArgumentError", msg: want.ErrorMessage(), frames: frames}
	plan := s.proc.planRetry("default", capturedOriginal(t, retryRaw), reg, failure, failedAt, func(int) int { return jitter })
	require.False(t, plan.toDead)
	got, err := wire.ParseJob(plan.payload)
	require.NoError(t, err)
	gotFrames, err := got.ErrorBacktrace()
	require.NoError(t, err)
	require.Equal(t, frames, gotFrames)
	bt, _ := got.Get("error_backtrace")
	rubyBT, _ := want.Get("error_backtrace")
	got.Set("error_backtrace", rubyBT)
	require.Equal(t, string(retryRaw), string(got.Bytes()))
	require.NotEqual(t, string(rubyBT.Encode()), string(bt.Encode()), "zlib bytes differ (expected, see the manifest)")
	score, err := contract.ParseScore(rubyfixtures.Find(t, dir, "retry_backtrace_true.json").Redis.Score)
	require.NoError(t, err)
	// 8.x's failed_at is whole milliseconds and Ruby reads the clock again
	// for the score: they differ by a little more than a millisecond.
	require.InDelta(t, score, contract.EpochSeconds(plan.retryAt), 0.002)

	deadRaw := rubyfixtures.Read(t, dir, "dead_retry_0.json")
	dead, err := wire.ParseJob(deadRaw)
	require.NoError(t, err)
	failedAt, _ = dead.Time("failed_at")
	plan = s.proc.planRetry("default", capturedOriginal(t, deadRaw), &registration{opts: HandlerOptions{Retry: 0}},
		&rubyError{class: "RuntimeError", msg: "ruby dies"}, failedAt, func(int) int { return 0 })
	require.True(t, plan.toDead)
	require.Equal(t, string(deadRaw), string(plan.payload))
}

// The second failure of the captured BtFailJob (Sidekiq 8.1.7), from the
// payload the poller moved back to its queue: retry_count 1, failed_at
// kept, error_message and error_class rewritten in place, retried_at
// appended, byte for byte but for the zlib bytes; the score is the
// failure time + 1 + 15 + rand(20) (7 in the capture).
func TestSecondFailureWritesRubysEntry(t *testing.T) {
	t.Parallel()
	s := planServer(wire.Version8)
	in := rubyfixtures.Read(t, "8.1.7", "poller_retry_enqueued.json")
	wantRaw := rubyfixtures.Read(t, "8.1.7", "retry_retried_once.json")
	want, err := wire.ParseJob(wantRaw)
	require.NoError(t, err)
	frames, err := want.ErrorBacktrace()
	require.NoError(t, err)
	retriedAt, ok := want.Time("retried_at")
	require.True(t, ok)
	failure := &rubyError{class: "ArgumentError", msg: want.ErrorMessage(), frames: frames}
	plan := s.proc.planRetry("default", in, &registration{opts: HandlerOptions{Retry: 2}}, failure, retriedAt,
		func(int) int { return 7 })
	require.False(t, plan.toDead)
	got, err := wire.ParseJob(plan.payload)
	require.NoError(t, err)
	gotFrames, err := got.ErrorBacktrace()
	require.NoError(t, err)
	require.Equal(t, frames, gotFrames)
	rubyBT, _ := want.Get("error_backtrace")
	got.Set("error_backtrace", rubyBT)
	require.Equal(t, string(wantRaw), string(got.Bytes()))
	score, err := contract.ParseScore(rubyfixtures.Find(t, "8.1.7", "retry_retried_once.json").Redis.Score)
	require.NoError(t, err)
	require.InDelta(t, score, contract.EpochSeconds(plan.retryAt), 0.002)
}
