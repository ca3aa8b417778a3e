package sidekiqtest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/sidekiqtest"
	"github.com/gojob/gojob/sidekiq/typed"
	"github.com/gojob/gojob/sidekiq/wire"
)

type Welcome struct {
	UserID int64
	Locale string
}

// enqueue pushes a job of class with args to queue ("" for the client's
// default), as perform_async does.
func enqueue[T any](ctx context.Context, c *sidekiq.Client, queue, class string, args T) (*sidekiq.PushResult, error) {
	job, err := typed.NewJob(class, args)
	if err != nil {
		return nil, err
	}
	if queue != "" {
		job.SetQueue(queue)
	}
	return c.Push(ctx, job, nil)
}

// signup is code under test: it pushes a welcome mail and a reminder.
func signup(ctx context.Context, c *sidekiq.Client, userID int64, remindAt time.Time) error {
	if _, err := enqueue(ctx, c, "mailers", "WelcomeMailJob", Welcome{UserID: userID, Locale: "nb"}); err != nil {
		return err
	}
	j, err := wire.NewJob("RemindJob", userID)
	if err != nil {
		return err
	}
	_, err = c.Push(ctx, j, &sidekiq.PushOpts{At: remindAt})
	return err
}

func TestFakeCapturesPushes(t *testing.T) {
	f := sidekiqtest.NewFake(t)
	ctx := context.Background()
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	require.NoError(t, signup(ctx, f.Client(), 7, at))

	j := sidekiqtest.RequirePushed(t, f, "WelcomeMailJob", &sidekiqtest.Want{Args: []any{Welcome{UserID: 7, Locale: "nb"}}, Queue: "mailers"})
	w, err := typed.Decode[Welcome](j)
	require.NoError(t, err)
	require.Equal(t, Welcome{7, "nb"}, w)
	sidekiqtest.RequirePushed(t, f, "RemindJob", &sidekiqtest.Want{Args: []any{7}, At: at, Queue: "default", Count: 1})
	sidekiqtest.RequireNotPushed(t, f, "RemindJob", &sidekiqtest.Want{Args: []any{7.0}})
	sidekiqtest.RequireNotPushed(t, f, "WelcomeMailJob", &sidekiqtest.Want{Queue: "default"})
	require.Len(t, f.Jobs(""), 2)

	// Nothing ran; Drain runs both, and what they push.
	var mu sync.Mutex
	var ran []string
	f.Handle("WelcomeMailJob", typed.Handler(func(ctx context.Context, job *wire.Job, w Welcome) error {
		mu.Lock()
		ran = append(ran, fmt.Sprint("welcome ", w.UserID))
		mu.Unlock()
		_, err := enqueue(ctx, f.Client(), "", "AuditJob", "sent")
		return err
	}))
	f.Handle("RemindJob", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		mu.Lock()
		ran = append(ran, "remind")
		mu.Unlock()
		return nil
	}))
	err = f.Drain(ctx)
	require.ErrorContains(t, err, "sidekiqtest: no handler for class AuditJob", "AuditJob has no handler")
	require.Equal(t, []string{"welcome 7", "remind"}, ran)
	f.Handle("AuditJob", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error { ran = append(ran, "audit"); return nil }))
	require.NoError(t, f.Drain(ctx), "AuditJob stayed pending")
	require.Equal(t, []string{"welcome 7", "remind", "audit"}, ran)
	require.NoError(t, f.Drain(ctx))
	f.Handle("AuditJob", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error { return errors.New("boom") }))
	_, err = enqueue(ctx, f.Client(), "", "AuditJob", "again")
	require.NoError(t, err)
	require.EqualError(t, f.Drain(ctx), "boom")
	require.EqualError(t, f.Drain(ctx), "boom", "a failed job stays pending")
	f.Handle("AuditJob", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error { return nil }))
	require.NoError(t, f.Drain(ctx))
	require.Len(t, ran, 3, "each job runs once")

	f.Clear()
	require.Empty(t, f.Jobs(""))
}

// fatalTB records a Fatalf and ends the goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func failure(f func(tb testing.TB)) string {
	tb := &fatalTB{}
	done := make(chan struct{})
	go func() { defer close(done); f(tb) }()
	<-done
	return tb.msg
}

func TestRequirePushedFails(t *testing.T) {
	f := sidekiqtest.NewFake(t)
	_, err := f.Client().Enqueue(context.Background(), "", "HardJob", 1, "two")
	require.NoError(t, err)
	msg := failure(func(tb testing.TB) {
		sidekiqtest.RequirePushed(tb, f, "HardJob", &sidekiqtest.Want{Args: []any{1, "three"}})
	})
	require.Contains(t, msg, `want 1 pushed HardJob job(s) matching args=[1,"three"], got 0; pushed:`)
	require.Contains(t, msg, `HardJob queue=default args=[1,"two"]`)
	msg = failure(func(tb testing.TB) { sidekiqtest.RequirePushed(tb, f, "HardJob", &sidekiqtest.Want{Count: 2}) })
	require.Contains(t, msg, "want 2 pushed HardJob job(s)")
	msg = failure(func(tb testing.TB) { sidekiqtest.RequireNotPushed(tb, f, "HardJob", nil) })
	require.Contains(t, msg, "want no pushed HardJob job matching anything, got 1")
	require.Empty(t, failure(func(tb testing.TB) {
		sidekiqtest.RequirePushed(tb, f, "HardJob", &sidekiqtest.Want{Args: []any{1, "two"}})
	}))
}

func TestInlineRunsOnPush(t *testing.T) {
	f := sidekiqtest.NewFake(t)
	f.Inline = true
	var got []Welcome
	boom := errors.New("smtp down")
	f.Handle("WelcomeMailJob", typed.Handler(func(ctx context.Context, job *wire.Job, w Welcome) error {
		if w.UserID == 0 {
			return boom
		}
		got = append(got, w)
		return nil
	}))
	f.Handle("RemindJob", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error { return nil }))
	ctx := context.Background()
	require.NoError(t, signup(ctx, f.Client(), 3, time.Now().Add(time.Hour)))
	require.Equal(t, []Welcome{{3, "nb"}}, got, "ran during the push")
	require.Len(t, f.Jobs(""), 2)
	require.NoError(t, f.Drain(ctx))
	require.Len(t, got, 1, "an inline job is not drained again")

	err := signup(ctx, f.Client(), 0, time.Now())
	require.ErrorIs(t, err, boom, "the handler's error is the push's")
}

// TestDrainQueues: the real server drains a private queue, jobs the
// drained jobs push included; a failure goes to the retry set.
func TestDrainQueues(t *testing.T) {
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	c, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool})
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 5 {
		_, err := enqueue(ctx, c, "drain", "WelcomeMailJob", Welcome{UserID: int64(i)})
		require.NoError(t, err)
	}
	var mu sync.Mutex
	seen := map[int64]bool{}
	res := sidekiqtest.DrainQueues(t, sidekiq.ServerConfig{Pool: pool, Queues: []wire.QueueWeight{{Name: "drain"}}, Concurrency: 2, DisablePoller: true},
		func(s *sidekiq.Server) {
			s.Handle("WelcomeMailJob", typed.Handler(func(ctx context.Context, job *wire.Job, w Welcome) error {
				if w.UserID == 4 {
					return errors.New("no such user")
				}
				mu.Lock()
				seen[w.UserID] = true
				mu.Unlock()
				if w.UserID < 10 {
					_, err := enqueue(ctx, s.Client(), "drain", "WelcomeMailJob", Welcome{UserID: w.UserID + 10})
					return err
				}
				return nil
			}), nil)
		})
	require.Len(t, res, 9)
	var failed []sidekiqtest.Outcome
	for _, o := range res {
		if o.Err != nil {
			failed = append(failed, o)
		}
	}
	require.Len(t, failed, 1)
	require.True(t, strings.Contains(failed[0].Err.Error(), "no such user"))
	require.Len(t, seen, 8)
	conn := pool.Get()
	defer conn.Close()
	n, err := conn.Do("ZCARD", "retry")
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
}

type Report struct {
	typed.Positional
	Day string
}

func (Report) JobClass() string { return "ReportJob" }

// A pushed job's arguments decode into the type that names its class.
func TestRequirePushedDecoded(t *testing.T) {
	f := sidekiqtest.NewFake(t)
	ctx := context.Background()
	_, err := typed.Push(ctx, f.Client(), Report{Day: "mon"}, nil)
	require.NoError(t, err)
	_, err = typed.Push(ctx, f.Client(), Report{Day: "tue"}, nil)
	require.NoError(t, err)
	got, err := typed.Decode[Report](sidekiqtest.RequirePushed(t, f, Report{}.JobClass(), &sidekiqtest.Want{Args: []any{Report{Day: "tue"}}}))
	require.NoError(t, err)
	require.Equal(t, Report{Day: "tue"}, got)
	got, err = typed.Decode[Report](sidekiqtest.RequirePushed(t, f, Report{}.JobClass(), nil))
	require.NoError(t, err)
	require.Equal(t, Report{Day: "mon"}, got)
	msg := failure(func(tb testing.TB) {
		sidekiqtest.RequirePushed(tb, f, Report{}.JobClass(), &sidekiqtest.Want{Queue: "other"})
	})
	require.Contains(t, msg, "want 1 pushed ReportJob job(s) matching queue=other, got 0")
}
