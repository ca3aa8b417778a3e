package sidekiq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/monoclock"
	"github.com/gojob/gojob/internal/redisreply"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Middleware wraps a push (client middleware, ClientConfig.Middleware) or
// the execution of a job (server middleware, Server.Use), as Sidekiq's
// middleware chains do; next runs the rest of the chain. A client
// middleware may change the job, and it stops the push by returning
// without calling next (the job is then reported with an empty jid); an
// error aborts the push. A server middleware's error is the job's
// outcome; the first added is outermost.
type Middleware func(ctx context.Context, job *wire.Job, next func(context.Context) error) error

// ClientConfig configures a Client.
type ClientConfig struct {
	// Pool is the Redis connection pool. Required.
	Pool *redis.Pool
	// Version is the Sidekiq release whose format is written (timestamps).
	// Default wire.Version6.
	Version wire.Version
	// Clock is the time source. Default the system clock.
	Clock clock.Clock
	// Middleware runs around every push, first added first.
	Middleware []Middleware
	// DefaultQueue replaces "default" as the queue of jobs that have none.
	DefaultQueue string
	// Extensions are told of every push after the middleware
	// (Extension.BeforePush).
	Extensions []Extension
}

func (c *ClientConfig) validate() error {
	if c.Pool == nil {
		return errors.New("sidekiq: ClientConfig.Pool is required")
	}
	for _, e := range c.Extensions {
		if !hasHook(e) {
			return errNoHook(e)
		}
	}
	return nil
}

// Client pushes jobs into Redis exactly as Ruby's Sidekiq::Client does.
// It is safe for concurrent use.
type Client struct {
	pool   *redis.Pool
	format *contract.LiveFormat
	clock  clock.Clock
	mw     []Middleware
	pushes []PushHook // the extensions' push hooks
	queue  string
}

// NewClient returns a client.
func NewClient(cfg *ClientConfig) (*Client, error) {
	if cfg == nil {
		return nil, errors.New("sidekiq: nil ClientConfig")
	}
	v := cmp.Or(cfg.Version, contract.DefaultVersion)
	return newClient(cfg, contract.FixedFormat(v))
}

// newClient is NewClient writing the format f holds at each push: a
// Server's client writes the server's format, which follows the cluster's
// version with FollowVersion (Server.Client).
func newClient(cfg *ClientConfig, f *contract.LiveFormat) (*Client, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	q := cfg.DefaultQueue
	if q == "" {
		q = "default"
	}
	c := &Client{pool: cfg.Pool, format: f, clock: monoclock.Or(cfg.Clock), mw: cfg.Middleware, queue: q}
	c.Extend(cfg.Extensions...)
	return c, nil
}

// Version returns the wire format the client writes now.
func (c *Client) Version() wire.Version { return c.format.Version() }

// Pool returns the client's Redis pool.
func (c *Client) Pool() *redis.Pool { return c.pool }

// Clock returns the client's time source.
func (c *Client) Clock() clock.Clock { return c.clock }

// DefaultQueue returns the queue of jobs that name none.
func (c *Client) DefaultQueue() string { return c.queue }

// Extend appends extensions; the client calls their PushHook, and one
// the client has already is not added twice. Call it before the client
// is shared. It panics on a value that implements no hook (Extension).
func (c *Client) Extend(ext ...Extension) {
	for _, e := range ext {
		if !hasHook(e) {
			panic(errNoHook(e))
		}
		h, ok := e.(PushHook)
		if ok && !slices.ContainsFunc(c.pushes, func(have PushHook) bool { return sameExtension(have, h) }) {
			c.pushes = append(c.pushes, h)
		}
	}
}

// sameExtension reports whether a and b are the same extension value.
func sameExtension(a, b any) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta != nil && ta.Comparable() && a == b
}

// PushOpts are per-push settings. A nil *PushOpts means "now".
type PushOpts struct {
	// At schedules the job for that time (Ruby's perform_at). A time not in
	// the future pushes the job at once. A job whose payload carries a
	// numeric "at" (Ruby's Client.push form) is scheduled by it when At and
	// In are unset. Client middleware sees "at" as epoch seconds; it is
	// never stored.
	At time.Time
	// In schedules the job after this delay (perform_in). Ignored when At is
	// set.
	In time.Duration
	// ExpiresIn makes the job expire that long after it is due (now, or
	// its scheduled time): Sidekiq Pro's expires_in. The payload carries
	// "expires_at" (epoch seconds), which the client middleware sees; a
	// server with the expiry extension drops the job, unrun, once that
	// time has passed. A payload's own "expires_in" (seconds, the Pro
	// client's set(expires_in:) form) does the same when ExpiresIn is zero.
	ExpiresIn time.Duration
	// Repush marks a job pushed once already: taken from the retry or
	// schedule set, or retried from the API. A unique job's lock is not
	// taken again (refusing the job now would lose it); its release still
	// only drops a lock it holds.
	Repush bool
}

// setExpiry writes "expires_at" from opts.ExpiresIn or the payload's
// "expires_in" (which it removes), counted from due, as Sidekiq Pro's
// client middleware does (Pro Expiring Jobs: "schedule a job to run two
// hours from now with a one hour expiration and it will expire three hours
// from now").
func setExpiry(job *wire.Job, opts *PushOpts, due time.Time) {
	var in float64
	if v, ok := job.Get("expires_in"); ok {
		job.Delete("expires_in")
		in, _ = v.Float()
	}
	if opts != nil && opts.ExpiresIn > 0 {
		in = opts.ExpiresIn.Seconds()
	}
	if in > 0 {
		job.Set("expires_at", rubyjson.FloatValue(contract.EpochSeconds(due)+in))
	}
}

func (o *PushOpts) runAt(now time.Time) (time.Time, bool) {
	if o == nil {
		return time.Time{}, false
	}
	at := o.At
	if at.IsZero() && o.In > 0 {
		at = now.Add(o.In)
	}
	if at.IsZero() || !at.After(now) {
		return time.Time{}, false
	}
	return at, true
}

// PushResult reports a push.
type PushResult struct {
	// JID is the job's jid, or "" when middleware stopped the push.
	JID string
	// Payload is the JSON written to Redis (nil when stopped).
	Payload []byte
	// Scheduled is true when the job went to the schedule set.
	Scheduled bool
	// Duplicate is true when the job has unique_for and another job of the
	// same class, queue and arguments holds the lock: nothing was pushed
	// (JID is "").
	Duplicate bool
}

// Push enqueues job. It normalizes the payload as Ruby's normalize_item does
// (defaults "retry": true and "queue" first, "jid" and "created_at" when
// missing), runs the client middleware, then in one pipelined round trip
// either SADD queues + LPUSH queue:<q> (with a fresh enqueued_at) or ZADD
// schedule (without enqueued_at). The job is modified in place.
func (c *Client) Push(ctx context.Context, job *wire.Job, opts *PushOpts) (*PushResult, error) {
	return c.push(ctx, job, opts, opts == nil || !opts.Repush)
}

func (c *Client) push(ctx context.Context, job *wire.Job, opts *PushOpts, lock bool) (*PushResult, error) {
	now := c.clock.Now()
	at, scheduled := opts.runAt(now)
	if !scheduled && job != nil {
		// Ruby's Client.push("at" => epoch) form.
		if v, ok := job.Get("at"); ok {
			if f, isNum := v.Float(); isNum {
				if t := contract.FromEpochSeconds(f); t.After(now) {
					at, scheduled = t, true
				}
			}
		}
	}
	if err := c.normalize(job, now, true); err != nil {
		return nil, err
	}
	if (opts != nil && opts.ExpiresIn > 0) || job.Has("expires_in") {
		due := now
		if scheduled {
			due = at
		}
		setExpiry(job, opts, due)
	}
	if scheduled {
		// Client middleware sees "at", as in Ruby; it is not stored.
		job.Set("at", rubyjson.FloatValue(contract.EpochSeconds(at)))
	}
	ok, err := c.runMiddleware(ctx, job)
	if err == nil && ok {
		err = c.beforePush(ctx, job)
	}
	job.Delete("at")
	if err != nil {
		return nil, err
	}
	if !ok {
		return &PushResult{}, nil
	}
	ttl, unique, err := uniqueFor(job)
	if err != nil {
		return nil, err
	}
	unique = unique && lock
	conn, err := c.pool.GetContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("sidekiq: push %s: %w", job.JID(), err)
	}
	defer conn.Close()
	var payload []byte
	if scheduled {
		job.Delete("enqueued_at")
		payload = job.Bytes()
	} else {
		// Ruby takes enqueued_at at the push (Client#atomic_push), after
		// created_at (normalize_item) and the middleware.
		job.Set("enqueued_at", contract.TimestampValue(c.clock.Now(), c.Version()))
		payload = job.Bytes()
	}
	if unique {
		var runAt time.Time
		if scheduled {
			runAt = at
		}
		pushed, err := pushUnique(ctx, conn, job, ttl, payload, runAt, now)
		if err != nil || !pushed {
			return &PushResult{Duplicate: !pushed}, err
		}
		return &PushResult{JID: job.JID(), Payload: payload, Scheduled: scheduled}, nil
	}
	if scheduled {
		conn.Send("ZADD", contract.KeySchedule, contract.Score(at), payload)
	} else {
		q := job.Queue()
		conn.Send("SADD", contract.KeyQueues, q)
		conn.Send("LPUSH", contract.QueueKey(q), payload)
	}
	if _, err := redisreply.Pipeline(ctx, conn); err != nil {
		return nil, fmt.Errorf("sidekiq: push %s: %w", job.JID(), err)
	}
	return &PushResult{JID: job.JID(), Payload: payload, Scheduled: scheduled}, nil
}

// Enqueue builds a job of class with args and pushes it: the Go form of
// Ruby's `Class.perform_async(*args)` (use Push for other options), with
// its key order: args before class (captured 6.4.1 and 7.3.10).
func (c *Client) Enqueue(ctx context.Context, queue, class string, args ...any) (*PushResult, error) {
	job, err := performAsyncJob(class, args...)
	if err != nil {
		return nil, err
	}
	if queue != "" {
		job.SetQueue(queue)
	}
	return c.Push(ctx, job, nil)
}

// performAsyncJob is the item perform_async hands to the client: "args",
// then "class".
func performAsyncJob(class string, args ...any) (*wire.Job, error) {
	j, err := wire.NewJob(class, args...)
	if err != nil {
		return nil, err
	}
	m := rubyjson.NewMap()
	a, _ := j.Get("args")
	m.Set("args", a)
	m.Set("class", rubyjson.StringValue(class))
	return wire.JobFromMap(m), nil
}

// PushBulk pushes many jobs, 1000 per pipelined round trip (as Sidekiq 7.1+
// does). All jobs share one created_at (when they have none) and, per
// round trip, one enqueued_at, as in Ruby. Jobs are grouped by queue: one
// SADD queues for all of them and one LPUSH per queue. With opts.At or In,
// all jobs go to the schedule set; without, a job whose payload carries a
// numeric "at" in the future is scheduled by it, as Push does (Ruby's
// push_bulk takes one "at" per job too), and the others are pushed now.
// It returns one jid per job in order: "" where middleware stopped it or
// a unique job's lock was held (a duplicate). After an error, the jids of
// the jobs pushed before it.
func (c *Client) PushBulk(ctx context.Context, jobs []*wire.Job, opts *PushOpts) ([]string, error) {
	now := c.clock.Now()
	v := c.Version()
	created := contract.TimestampValue(now, v)
	at, scheduled := opts.runAt(now)
	// jobAt[i] is job i's own time when it has one (normalize drops "at").
	var jobAt []time.Time
	for i, j := range jobs {
		if scheduled || j == nil {
			break
		}
		v, _ := j.Get("at")
		if f, isNum := v.Float(); isNum {
			if t := contract.FromEpochSeconds(f); t.After(now) {
				if jobAt == nil {
					jobAt = make([]time.Time, len(jobs))
				}
				jobAt[i] = t
			}
		}
	}
	runAt := func(i int) (time.Time, bool) {
		if jobAt != nil && !jobAt[i].IsZero() {
			return jobAt[i], true
		}
		return at, scheduled
	}
	for i, j := range jobs {
		if err := c.normalize(j, now, false); err != nil {
			return nil, fmt.Errorf("sidekiq: bulk job %d: %w", i, err)
		}
		if !j.Has("created_at") {
			j.Set("created_at", created)
		}
		if (opts != nil && opts.ExpiresIn > 0) || j.Has("expires_in") {
			due, scheduled := runAt(i)
			if !scheduled {
				due = now
			}
			setExpiry(j, opts, due)
		}
	}
	jids := make([]string, len(jobs))
	conn, err := c.pool.GetContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("sidekiq: push bulk: %w", err)
	}
	defer conn.Close()
	batch := contract.BulkBatchSize(v)
	for start := 0; start < len(jobs); start += batch {
		end := min(start+batch, len(jobs))
		enq := contract.TimestampValue(c.clock.Now(), v)
		var queues []any
		byQueue := map[string][]any{}
		var zadd []any
		// The middleware of every job of the batch runs first, then the
		// extensions see the batch's jobs (with "at" when scheduled), then
		// the batch is written: nothing of it reaches Redis before its
		// extensions are done, unique jobs included.
		passed := make([]int, 0, end-start)
		for i := start; i < end; i++ {
			j := jobs[i]
			if at, scheduled := runAt(i); scheduled {
				j.Set("at", rubyjson.FloatValue(contract.EpochSeconds(at)))
			}
			ok, err := c.runMiddleware(ctx, j)
			if err != nil {
				j.Delete("at")
				return jids, fmt.Errorf("sidekiq: bulk job %d: %w", i, err)
			}
			if ok {
				passed = append(passed, i)
			} else {
				j.Delete("at")
			}
		}
		if err := c.beforeBulkPush(ctx, jobs, passed); err != nil {
			return jids, fmt.Errorf("sidekiq: push bulk: %w", err)
		}
		type uniqueJob struct {
			i   int
			ttl time.Duration
		}
		var uniques []uniqueJob
		for _, i := range passed {
			j := jobs[i]
			j.Delete("at")
			ttl, unique, err := uniqueFor(j)
			if err != nil {
				return jids, fmt.Errorf("sidekiq: bulk job %d: %w", i, err)
			}
			if unique {
				uniques = append(uniques, uniqueJob{i, ttl})
				continue
			}
			jids[i] = j.JID()
			if at, scheduled := runAt(i); scheduled {
				j.Delete("enqueued_at")
				zadd = append(zadd, contract.Score(at), j.Bytes())
				continue
			}
			j.Set("enqueued_at", enq)
			q := j.Queue()
			if _, seen := byQueue[q]; !seen {
				queues = append(queues, q)
			}
			byQueue[q] = append(byQueue[q], j.Bytes())
		}
		for _, u := range uniques {
			// Its own lock-and-push step; a duplicate keeps "".
			j := jobs[u.i]
			at, scheduled := runAt(u.i)
			if scheduled {
				j.Delete("enqueued_at")
			} else {
				at = time.Time{}
				j.Set("enqueued_at", enq)
			}
			pushed, err := pushUnique(ctx, conn, j, u.ttl, j.Bytes(), at, now)
			if err != nil {
				return jids, err
			}
			if pushed {
				jids[u.i] = j.JID()
			}
		}
		n := 0
		if len(zadd) > 0 {
			conn.Send("ZADD", append([]any{contract.KeySchedule}, zadd...)...)
			n++
		}
		if len(queues) > 0 {
			conn.Send("SADD", append([]any{contract.KeyQueues}, queues...)...)
			n++
			for _, q := range queues {
				conn.Send("LPUSH", append([]any{contract.QueueKey(q.(string))}, byQueue[q.(string)]...)...)
				n++
			}
		}
		if n == 0 {
			continue
		}
		if _, err := redisreply.Pipeline(ctx, conn); err != nil {
			return jids, fmt.Errorf("sidekiq: push bulk: %w", err)
		}
	}
	return jids, nil
}

// PushPayload does what Push does before its write (Ruby's
// normalize_item, the client middleware, the extensions, a fresh
// enqueued_at) and returns the queue and the payload Push would LPUSH, for
// components that write them in their own script together with other
// state (the poller moves a due job from its set to its queue in one
// step; the cron scheduler claims a tick and pushes its job in one step).
// The caller must SADD queues and LPUSH queue:<queue>, as Push does. ok is
// false when a middleware stopped the push.
func (c *Client) PushPayload(ctx context.Context, job *wire.Job) (queue string, payload []byte, ok bool, err error) {
	now := c.clock.Now()
	if err := c.normalize(job, now, true); err != nil {
		return "", nil, false, err
	}
	if job.Has("expires_in") {
		setExpiry(job, nil, now)
	}
	if ok, err = c.runMiddleware(ctx, job); err == nil && ok {
		err = c.beforePush(ctx, job)
	}
	if err != nil || !ok {
		return "", nil, false, err
	}
	job.Set("enqueued_at", contract.TimestampValue(c.clock.Now(), c.Version()))
	return job.Queue(), job.Bytes(), true, nil
}

// normalize applies Ruby's normalize_item and validate.
func (c *Client) normalize(job *wire.Job, now time.Time, setCreated bool) error {
	if job == nil {
		return errors.New("sidekiq: nil job")
	}
	defaults := rubyjson.NewMap()
	defaults.Set("retry", rubyjson.BoolValue(true))
	defaults.Set("queue", rubyjson.StringValue(c.queue))
	contract.MergeDefaults(job, defaults)
	job.Delete("at")
	if err := contract.Validate(job); err != nil {
		return err
	}
	if !job.Has("jid") {
		job.Set("jid", rubyjson.StringValue(contract.NewJID()))
	}
	if setCreated && !job.Has("created_at") {
		job.Set("created_at", contract.TimestampValue(now, c.Version()))
	}
	return nil
}

func (c *Client) runMiddleware(ctx context.Context, job *wire.Job) (bool, error) {
	if len(c.mw) == 0 {
		return true, nil
	}
	reached := false
	var call func(i int) func(context.Context) error
	call = func(i int) func(context.Context) error {
		return func(ctx context.Context) error {
			if i == len(c.mw) {
				reached = true
				return nil
			}
			return c.mw[i](ctx, job, call(i+1))
		}
	}
	if err := call(0)(ctx); err != nil {
		return false, err
	}
	return reached, nil
}

// beforePush tells the extensions of a single push.
func (c *Client) beforePush(ctx context.Context, job *wire.Job) error {
	if len(c.pushes) == 0 {
		return nil
	}
	jobs := []*wire.Job{job}
	for _, e := range c.pushes {
		if err := e.BeforePush(ctx, jobs); err != nil {
			return err
		}
	}
	return nil
}

// beforeBulkPush tells the extensions of a bulk batch: the jobs at the
// indexes in passed, those the middleware let through.
func (c *Client) beforeBulkPush(ctx context.Context, jobs []*wire.Job, passed []int) error {
	if len(c.pushes) == 0 || len(passed) == 0 {
		return nil
	}
	batch := make([]*wire.Job, len(passed))
	for k, i := range passed {
		batch[k] = jobs[i]
	}
	for _, e := range c.pushes {
		if err := e.BeforePush(ctx, batch); err != nil {
			return err
		}
	}
	return nil
}
