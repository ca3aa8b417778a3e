package ordered

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/internal/monoclock"
	"github.com/gojob/gojob/internal/orderedstore"
	"github.com/gojob/gojob/sidekiq/wire"
)

// defaultShards is the shard count of a queue created without one.
const defaultShards = 16

// errNoKey is returned for a push without an ordering key.
var errNoKey = errors.New("ordered: an ordering key is required")

// shardsMismatchError fails a worker configured with another shard count
// than its queue has. Changing the count would send a key's later jobs to
// another shard, where they could overtake its earlier ones; see
// docs/ordered.md for a migration.
type shardsMismatchError struct {
	Queue      string
	Shards     int // the queue's
	Configured int // asked for
}

func (e *shardsMismatchError) Error() string {
	return fmt.Sprintf("ordered: queue %s has %d shards, not %d (a queue's shard count cannot change; see docs/ordered.md)",
		e.Queue, e.Shards, e.Configured)
}

func (e *shardsMismatchError) Is(target error) bool { return target == orderedstore.ErrShardsMismatch }

// ClientConfig configures a Client.
type ClientConfig struct {
	Pool *redis.Pool
	// Shards is the shard count a queue gets when a push creates it
	// (default 16). A queue that exists keeps its own.
	Shards int
	Clock  clock.Clock
}

// Client pushes jobs to ordered queues.
type Client struct {
	pool   *redis.Pool
	shards int
	clock  clock.Clock

	mu    sync.Mutex
	known map[string]int // queue → shard count
}

// NewClient returns a client.
func NewClient(cfg *ClientConfig) (*Client, error) {
	if cfg == nil || cfg.Pool == nil {
		return nil, errors.New("ordered: ClientConfig.Pool is required")
	}
	if cfg.Shards < 0 {
		return nil, errors.New("ordered: ClientConfig.Shards must not be negative")
	}
	return &Client{pool: cfg.Pool, shards: cmp.Or(cfg.Shards, defaultShards), clock: monoclock.Or(cfg.Clock), known: map[string]int{}}, nil
}

// PushOpts are the ordering options of one push.
type PushOpts struct {
	// Key is the ordering key (Lowkiq's id): jobs with the same key run
	// one after the other in score order, never in parallel.
	Key string
	// Score orders the key's jobs (Lowkiq's score: a version or a
	// timestamp). Nil means the queue's next sequence number, so jobs run
	// in push order across every client.
	Score *float64
	// At delays the key's jobs until then when the key has nothing queued
	// (a key already queued keeps its time). Zero means now.
	At time.Time
}

// PushItem is one job of PushBulk.
type PushItem struct {
	Job  *wire.Job
	Opts PushOpts
}

// Push adds job to the ordered queue job.Queue() ("default" when unset)
// under opts.Key. It returns the number of payloads added: 0 when an equal
// payload was already pending for the key, which is merged (it keeps the
// lower score).
func (c *Client) Push(ctx context.Context, job *wire.Job, opts *PushOpts) (int, error) {
	if opts == nil {
		return 0, errNoKey
	}
	return c.PushBulk(ctx, []PushItem{{Job: job, Opts: *opts}})
}

// PushBulk pushes several jobs, each to its own queue, in one round trip
// per queue; the jobs of one queue get increasing scores in slice order.
// It returns the number of payloads added (see Push), also when an error
// stops it after some queues.
func (c *Client) PushBulk(ctx context.Context, items []PushItem) (int, error) {
	byQueue := map[string][]PushItem{}
	var order []string
	for _, it := range items {
		if it.Opts.Key == "" {
			return 0, errNoKey
		}
		if it.Job == nil || it.Job.Class() == "" {
			return 0, errors.New("ordered: a job needs a class")
		}
		q := cmp.Or(it.Job.Queue(), "default")
		if err := orderedstore.ValidQueue(q); err != nil {
			return 0, err
		}
		if _, ok := byQueue[q]; !ok {
			order = append(order, q)
		}
		byQueue[q] = append(byQueue[q], it)
	}
	added := 0
	for _, q := range order {
		n, err := c.pushQueue(ctx, q, byQueue[q])
		if err != nil {
			return added, err
		}
		added += n
	}
	return added, nil
}

func (c *Client) pushQueue(ctx context.Context, q string, items []PushItem) (int, error) {
	conn, err := c.pool.GetContext(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	shards, err := c.shardsOf(ctx, conn, q)
	if err != nil {
		return 0, err
	}
	for attempt := 0; ; attempt++ {
		now := c.clock.Now()
		args := make([]any, 0, 3+5*len(items))
		args = append(args, orderedstore.Prefix(q), shards, now.UnixMilli())
		for _, it := range items {
			score := ""
			if it.Opts.Score != nil {
				score = strconv.FormatFloat(*it.Opts.Score, 'f', -1, 64)
			}
			at := now
			if !it.Opts.At.IsZero() {
				at = it.Opts.At
			}
			args = append(args, it.Opts.Key, orderedstore.ShardOf(it.Opts.Key, shards), payload(it.Job), score, at.UnixMilli())
		}
		n, err := redis.Int(orderedstore.PushScript.DoContext(ctx, conn, args...))
		if err == nil {
			return n, nil
		}
		real, ok := parseShardsError(err)
		if !ok || attempt > 0 {
			return 0, fmt.Errorf("ordered: push to %s: %w", q, err)
		}
		// The queue was created meanwhile with another count: hash again.
		c.remember(q, real)
		shards = real
	}
}

// shardsOf returns the queue's shard count, creating nothing: a queue
// unknown to Redis gets c.shards at its first push.
func (c *Client) shardsOf(ctx context.Context, conn redis.Conn, q string) (int, error) {
	c.mu.Lock()
	n, ok := c.known[q]
	c.mu.Unlock()
	if ok {
		return n, nil
	}
	n, err := orderedstore.QueueShards(ctx, conn, q)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		n = c.shards
		if _, err := redis.DoContext(conn, ctx, "SADD", orderedstore.KeyQueues, q); err != nil {
			return 0, err
		}
	}
	c.remember(q, n)
	return n, nil
}

func (c *Client) remember(q string, n int) {
	c.mu.Lock()
	c.known[q] = n
	c.mu.Unlock()
}

func parseShardsError(err error) (int, bool) {
	var re redis.Error
	if !errors.As(err, &re) {
		return 0, false
	}
	rest, ok := strings.CutPrefix(string(re), "ORDERED_SHARDS ")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil
}

// declare creates queue q with shards shards, or checks that it has
// them; shards 0 adopts the queue's count (defaultShards for a new
// queue). It returns the queue's shard count.
func declare(ctx context.Context, pool *redis.Pool, q string, shards int, now time.Time) (int, error) {
	if err := orderedstore.ValidQueue(q); err != nil {
		return 0, err
	}
	if shards < 0 {
		return 0, errors.New("ordered: shards must not be negative")
	}
	conn, err := pool.GetContext(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	want := cmp.Or(shards, defaultShards)
	if _, err := redis.DoContext(conn, ctx, "HSETNX", orderedstore.KeysOf(q).Meta(), "created_at", now.UnixMilli()); err != nil {
		return 0, err
	}
	created, err := redis.Int(redis.DoContext(conn, ctx, "HSETNX", orderedstore.KeysOf(q).Meta(), "shards", want))
	if err != nil {
		return 0, err
	}
	if _, err := redis.DoContext(conn, ctx, "SADD", orderedstore.KeyQueues, q); err != nil {
		return 0, err
	}
	if created == 1 {
		return want, nil
	}
	have, err := orderedstore.QueueShards(ctx, conn, q)
	if err != nil {
		return 0, err
	}
	if shards != 0 && have != shards {
		return 0, &shardsMismatchError{Queue: q, Shards: have, Configured: shards}
	}
	return have, nil
}

// payload returns what an ordered queue stores for job: the job without
// the fields that differ between two pushes of the same work (jid,
// created_at, enqueued_at, queue), so that equal payloads merge as
// Lowkiq's do.
func payload(job *wire.Job) []byte {
	j := job.Clone()
	for _, f := range []string{"jid", "created_at", "enqueued_at", "queue"} {
		j.Delete(f)
	}
	return j.Bytes()
}
