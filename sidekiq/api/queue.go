package api

import (
	"context"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// JobRecord is one stored job as Ruby's Sidekiq::JobRecord sees it: the
// exact stored bytes and, when they are a JSON object, the parsed job.
type JobRecord struct {
	// Queue is the queue the record was read from, or for a sorted-set
	// entry the payload's "queue".
	Queue string
	// Value is the exact stored bytes; deletes match on them.
	Value []byte
	// Job is the parsed payload, nil when Value is not a JSON object.
	Job *wire.Job
	// ParseErr is why Job is nil.
	ParseErr error
}

func newJobRecord(value []byte, queue string) *JobRecord {
	r := &JobRecord{Value: value}
	r.Job, r.ParseErr = wire.ParseJob(value)
	if queue == "" && r.Job != nil {
		queue = r.Job.Queue()
	}
	r.Queue = queue
	return r
}

// JID returns the job's jid ("" for an unparsable payload).
func (r *JobRecord) JID() string {
	if r.Job == nil {
		return ""
	}
	return r.Job.JID()
}

// Class returns the job's class ("" for an unparsable payload).
func (r *JobRecord) Class() string {
	if r.Job == nil {
		return ""
	}
	return r.Job.Class()
}

// Args returns the job's args; for an unparsable payload, a one-element
// array holding the raw string, as Ruby's JobRecord does for the Web UI.
func (r *JobRecord) Args() []rubyjson.Value {
	if r.Job == nil {
		return []rubyjson.Value{rubyjson.StringValue(string(r.Value))}
	}
	return r.Job.Args()
}

// Queue is one queue (Ruby's Sidekiq::Queue). The handle holds no state.
type Queue struct {
	api  *API
	name string
}

// Queue returns the queue named name (without the "queue:" prefix).
func (a *API) Queue(name string) *Queue { return &Queue{api: a, name: name} }

// Queues returns every queue of the queues set, sorted by name (Ruby's
// Queue.all).
func (a *API) Queues(ctx context.Context) ([]*Queue, error) {
	conn, names, err := a.connMembers(ctx, "list queues", contract.KeyQueues)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	out := make([]*Queue, len(names))
	for i, n := range names {
		out[i] = a.Queue(n)
	}
	return out, nil
}

// Name returns the queue's name.
func (q *Queue) Name() string { return q.name }

// Size returns LLEN queue:<name>.
func (q *Queue) Size(ctx context.Context) (int64, error) {
	conn, err := q.api.conn(ctx, "queue size")
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	n, err := redis.Int64(redis.DoContext(conn, ctx, "LLEN", contract.QueueKey(q.name)))
	if err != nil {
		return 0, fmt.Errorf("sidekiq: size of queue %s: %w", q.name, err)
	}
	return n, nil
}

// Latency returns the age of the oldest job (LINDEX queue:<name> -1) from
// its enqueued_at, else created_at, read by lexical type (integer ms or
// float seconds); 0 for an empty queue or a job with neither. An
// unparsable oldest job is an error, as in Ruby.
func (q *Queue) Latency(ctx context.Context) (time.Duration, error) {
	conn, err := q.api.conn(ctx, "queue latency")
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	tail, err := redis.Bytes(redis.DoContext(conn, ctx, "LINDEX", contract.QueueKey(q.name), -1))
	if err == redis.ErrNil {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sidekiq: latency of queue %s: %w", q.name, err)
	}
	job, err := wire.ParseJob(tail)
	if err != nil {
		return 0, fmt.Errorf("sidekiq: latency of queue %s: %w", q.name, err)
	}
	return contract.Latency(job, q.api.clock.Now()), nil
}

// page is Page without a filter: it reads limit jobs (0 means 25) after
// the newest offset, newest first, as the Web UI's queue page does (MULTI
// LLEN + LRANGE). It returns them with the queue's length when they were
// read.
func (q *Queue) page(ctx context.Context, offset, limit int) ([]*JobRecord, int64, error) {
	off, limit, err := pageBounds(offset, limit)
	if err != nil {
		return nil, 0, err
	}
	conn, err := q.api.conn(ctx, "queue page")
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close()
	key := contract.QueueKey(q.name)
	replies, err := redisx.ExecMulti(ctx, conn, func(c redis.Conn) {
		c.Send("LLEN", key)
		c.Send("LRANGE", key, off, off+limit-1)
	})
	if err != nil {
		return nil, 0, fmt.Errorf("sidekiq: page of queue %s: %w", q.name, err)
	}
	size, err := redis.Int64(replies[0], nil)
	if err != nil {
		return nil, 0, fmt.Errorf("sidekiq: page of queue %s: %w", q.name, err)
	}
	vals, err := redis.ByteSlices(replies[1], nil)
	if err != nil {
		return nil, 0, fmt.Errorf("sidekiq: page of queue %s: %w", q.name, err)
	}
	records := make([]*JobRecord, len(vals))
	for i, v := range vals {
		records[i] = newJobRecord(v, q.name)
	}
	return records, size, nil
}

// Each calls fn for every job, newest first, as Ruby's Queue#each: LRANGE
// pages of 50 from index 0, shifting the next page back by the number of
// jobs that left the queue meanwhile (so deleting while iterating skips
// nothing). Unlike Ruby, a shift larger than the position is clamped to 0.
// An error from fn stops the iteration and is returned.
func (q *Queue) Each(ctx context.Context, fn func(*JobRecord) error) error {
	const pageSize = 50
	initial, err := q.Size(ctx)
	if err != nil {
		return err
	}
	var deleted int64
	for page := int64(0); ; page++ {
		start := max(page*pageSize-deleted, 0)
		vals, err := q.lrange(ctx, start, start+pageSize-1)
		if err != nil {
			return err
		}
		if len(vals) == 0 {
			return nil
		}
		for _, v := range vals {
			if err := fn(newJobRecord(v, q.name)); err != nil {
				return err
			}
		}
		size, err := q.Size(ctx)
		if err != nil {
			return err
		}
		deleted = initial - size
	}
}

// lrange reads LRANGE queue:<name> start stop on a connection of its own.
func (q *Queue) lrange(ctx context.Context, start, stop int64) ([][]byte, error) {
	conn, err := q.api.conn(ctx, "iterate queue "+q.name)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	vals, err := redis.ByteSlices(redis.DoContext(conn, ctx, "LRANGE", contract.QueueKey(q.name), start, stop))
	if err != nil {
		return nil, fmt.Errorf("sidekiq: iterate queue %s: %w", q.name, err)
	}
	return vals, nil
}

// FindJob returns the job with jid: Redis scans the queue in chunks and
// returns only the entries holding the jid (see Locate). It returns an
// error wrapping ErrJobNotFound when there is none.
func (q *Queue) FindJob(ctx context.Context, jid string) (*JobRecord, error) {
	rec, err := q.locate(ctx, jid)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, fmt.Errorf("sidekiq: job %s in queue %s: %w", jid, q.name, ErrJobNotFound)
	}
	return rec, nil
}

// DeleteJob removes one job by its exact stored bytes (LREM queue:<name> 1
// <value>), as the Web UI's delete button. It reports whether one was
// removed.
func (q *Queue) DeleteJob(ctx context.Context, value []byte) (bool, error) {
	conn, err := q.api.conn(ctx, "delete job")
	if err != nil {
		return false, err
	}
	defer conn.Close()
	n, err := redis.Int(redis.DoContext(conn, ctx, "LREM", contract.QueueKey(q.name), 1, value))
	if err != nil {
		return false, fmt.Errorf("sidekiq: delete job from queue %s: %w", q.name, err)
	}
	return n > 0, nil
}

// Clear deletes the queue and removes it from the queues set (MULTI
// UNLINK queue:<name>; SREM queues <name>; EXEC).
func (q *Queue) Clear(ctx context.Context) error {
	conn, err := q.api.conn(ctx, "clear queue")
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = redisx.ExecMulti(ctx, conn, func(c redis.Conn) {
		c.Send("UNLINK", contract.QueueKey(q.name))
		c.Send("SREM", contract.KeyQueues, q.name)
	})
	if err != nil {
		return fmt.Errorf("sidekiq: clear queue %s: %w", q.name, err)
	}
	return nil
}
