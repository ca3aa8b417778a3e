// Package limit provides limiters shared by every process on a Redis, with
// the semantics Sidekiq Enterprise documents for its concurrent, bucket and
// window limiters: a handler runs its work inside Within, and a job over a
// limit returns *sidekiq.OverLimitError, which the server turns into a
// reschedule rather than a failure. docs/limiters.md describes the keys.
package limit

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/google/uuid"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/internal/monoclock"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

var (
	//go:embed lua/concurrent_acquire.lua
	acquireSrc    string
	acquireScript = redis.NewScript(1, acquireSrc)
	//go:embed lua/bucket.lua
	bucketSrc    string
	bucketScript = redis.NewScript(1, bucketSrc)
	//go:embed lua/window.lua
	windowSrc    string
	windowScript = redis.NewScript(1, windowSrc)
)

// keyPrefix starts every limiter key.
const keyPrefix = "gojob-limiter:"

// Limiter runs work under a limit.
type Limiter interface {
	// Within runs fn if the limit allows it now (a concurrent limiter waits
	// for a slot up to its wait timeout); otherwise it returns
	// *sidekiq.OverLimitError without running fn.
	Within(ctx context.Context, fn func(context.Context) error) error
}

// Options configure a limiter; zero values take the defaults.
type Options struct {
	// Clock is the time source (default the system clock).
	Clock clock.Clock
	// WaitTimeout: how long a concurrent limiter waits for a slot (default
	// 5 s, as Enterprise; 0 after setting NoWait).
	WaitTimeout time.Duration
	NoWait      bool
	// LockTimeout: how long a concurrent slot outlives a holder that stopped
	// refreshing it, such as a process killed with -9 (default 30 s). A
	// live holder refreshes its slot every LockTimeout/3, so a job may run
	// longer than LockTimeout without losing it.
	LockTimeout time.Duration
	// RetryAfter is the reschedule delay a concurrent limiter reports when
	// full (0: the server's backoff).
	RetryAfter time.Duration
}

func (o *Options) clock() clock.Clock {
	if o == nil {
		return monoclock.Or(nil)
	}
	return monoclock.Or(o.Clock)
}

func ms(t time.Time) int64 { return t.UnixMilli() }

// concurrent is the limiter NewConcurrent returns.
type concurrent struct {
	pool  *redis.Pool
	name  string
	limit int
	opts  Options
}

// NewConcurrent returns a concurrent limiter named name: at most limit
// holders at once across all processes. Its Within waits up to the wait
// timeout for a slot, runs fn holding it (refreshed while fn runs) and
// frees it.
func NewConcurrent(pool *redis.Pool, name string, limit int, opts *Options) (Limiter, error) {
	if name == "" || limit < 1 {
		return nil, fmt.Errorf("limit: a concurrent limiter needs a name and a limit of at least 1")
	}
	c := &concurrent{pool: pool, name: name, limit: limit}
	if opts != nil {
		c.opts = *opts
	}
	if c.opts.WaitTimeout == 0 && !c.opts.NoWait {
		c.opts.WaitTimeout = 5 * time.Second
	}
	if c.opts.LockTimeout <= 0 {
		c.opts.LockTimeout = 30 * time.Second
	}
	return c, nil
}

// key is the limiter's sorted set of slots.
func (c *concurrent) key() string { return keyPrefix + c.name + ":concurrent" }

// acquirePoll is how often a waiting acquire tries again.
const acquirePoll = 50 * time.Millisecond

// Within waits up to the wait timeout for a slot, runs fn holding it
// (refreshed while fn runs) and frees it.
func (c *concurrent) Within(ctx context.Context, fn func(context.Context) error) error {
	token := uuid.NewString()
	clk := c.opts.clock()
	deadline := clk.Now().Add(c.opts.WaitTimeout)
	for {
		ok, err := c.acquire(ctx, token)
		if err != nil {
			return err
		}
		if ok {
			break
		}
		if !clk.Now().Before(deadline) {
			return &sidekiq.OverLimitError{Limiter: c.name, RetryAfter: c.opts.RetryAfter}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(acquirePoll):
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.refresh(token, stop)
	}()
	defer func() {
		close(stop)
		wg.Wait()
		c.release(token)
	}()
	return fn(ctx)
}

func (c *concurrent) acquire(ctx context.Context, token string) (bool, error) {
	conn, err := c.pool.GetContext(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	now := c.opts.clock().Now()
	n, err := redis.Int(acquireScript.DoContext(ctx, conn, c.key(), ms(now), c.limit, token, ms(now.Add(c.opts.LockTimeout))))
	if err != nil {
		return false, fmt.Errorf("limit %s: %w", c.name, err)
	}
	return n == 1, nil
}

// refresh pushes the slot's expiry forward until stop closes.
func (c *concurrent) refresh(token string, stop <-chan struct{}) {
	t := time.NewTicker(c.opts.LockTimeout / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			conn := c.pool.Get()
			conn.Do("ZADD", c.key(), "XX", ms(c.opts.clock().Now().Add(c.opts.LockTimeout)), token)
			conn.Close()
		}
	}
}

func (c *concurrent) release(token string) {
	conn := c.pool.Get()
	defer conn.Close()
	conn.Do("ZREM", c.key(), token)
}

// bucket is the limiter NewBucket returns.
type bucket struct {
	pool     *redis.Pool
	name     string
	limit    int
	interval time.Duration
	opts     Options
}

// NewBucket returns a bucket limiter of limit uses per interval (at least a
// second, in whole seconds), the intervals aligned to the epoch (per
// second, minute, hour, day: Enterprise's bucket limiter).
func NewBucket(pool *redis.Pool, name string, limit int, interval time.Duration, opts *Options) (Limiter, error) {
	if name == "" || limit < 1 || interval < time.Second || interval%time.Second != 0 {
		return nil, errors.New("limit: a bucket limiter needs a name, a limit of at least 1 and an interval of whole seconds")
	}
	b := &bucket{pool: pool, name: name, limit: limit, interval: interval}
	if opts != nil {
		b.opts = *opts
	}
	return b, nil
}

// Within runs fn if this interval has uses left.
func (b *bucket) Within(ctx context.Context, fn func(context.Context) error) error {
	now := b.opts.clock().Now()
	start := now.Truncate(b.interval)
	key := keyPrefix + b.name + ":bucket:" + strconv.FormatInt(start.Unix(), 10)
	conn, err := b.pool.GetContext(ctx)
	if err != nil {
		return err
	}
	n, err := redis.Int(bucketScript.DoContext(ctx, conn, key, b.limit, (2 * b.interval).Milliseconds()))
	conn.Close()
	if err != nil {
		return fmt.Errorf("limit %s: %w", b.name, err)
	}
	if n == 0 {
		return &sidekiq.OverLimitError{Limiter: b.name, RetryAfter: start.Add(b.interval).Sub(now)}
	}
	return fn(ctx)
}

// window is the limiter NewWindow returns.
type window struct {
	pool     *redis.Pool
	name     string
	limit    int
	interval time.Duration
	opts     Options
}

// NewWindow returns a sliding-window limiter: at most limit uses in any
// interval.
func NewWindow(pool *redis.Pool, name string, limit int, interval time.Duration, opts *Options) (Limiter, error) {
	if name == "" || limit < 1 || interval < time.Millisecond {
		return nil, errors.New("limit: a window limiter needs a name, a limit of at least 1 and an interval")
	}
	w := &window{pool: pool, name: name, limit: limit, interval: interval}
	if opts != nil {
		w.opts = *opts
	}
	return w, nil
}

// key is the window's sorted set of uses.
func (w *window) key() string { return keyPrefix + w.name + ":window" }

// Within runs fn if fewer than Limit uses fall in the last interval.
func (w *window) Within(ctx context.Context, fn func(context.Context) error) error {
	conn, err := w.pool.GetContext(ctx)
	if err != nil {
		return err
	}
	wait, err := redis.Int64(windowScript.DoContext(ctx, conn, w.key(), ms(w.opts.clock().Now()), w.limit,
		w.interval.Milliseconds(), uuid.NewString()))
	conn.Close()
	if err != nil {
		return fmt.Errorf("limit %s: %w", w.name, err)
	}
	if wait > 0 {
		return &sidekiq.OverLimitError{Limiter: w.name, RetryAfter: time.Duration(wait) * time.Millisecond}
	}
	return fn(ctx)
}

// ClassMiddleware runs every job of class inside l (gojob work --limit
// CLASS=N uses a concurrent limiter (NewConcurrent) named "class:CLASS").
func ClassMiddleware(class string, l Limiter) sidekiq.Middleware {
	return func(ctx context.Context, job *wire.Job, next func(context.Context) error) error {
		if job.Class() != class {
			return next(ctx)
		}
		return l.Within(ctx, next)
	}
}
