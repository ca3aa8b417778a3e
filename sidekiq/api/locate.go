package api

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Location is where a job is now (Locate).
type Location struct {
	// Where is "running", "queue", "schedule", "retry", "dead", or
	// "orphaned": in the in-progress list of a process that is gone, until
	// a live process's recovery pushes it back to its queue.
	Where string
	// Queue is its queue.
	Queue string
	// Process is the identity of the process running it (running), or the
	// list identity of the gone one (orphaned).
	Process string
	// TID is the thread running it, "" when no work hash shows it yet.
	TID string
	// List is the in-progress list holding it (running, orphaned).
	List string
	// At is when it started (running; zero when no work hash shows it
	// yet, see StartedAfter), or its set's score: when it runs (schedule,
	// retry) or died (dead). Zero in a queue.
	At time.Time
	// StartedAfter is, for a running job that no work hash shows yet, its
	// process's last heartbeat: it started after that (Running).
	StartedAfter time.Time
	// Raw is the payload as stored; Job is it parsed, nil when it is not
	// a JSON object.
	Raw []byte
	Job *wire.Job
	// Entry is the set entry (schedule, retry, dead), for its actions.
	Entry *SortedEntry
}

// Locate finds the job jid wherever it is, and returns nil, nil when it is
// nowhere. It looks where a job is found cheaply first and at each place
// reads only what matches:
//
//  1. the running jobs (Running: the live processes' work hashes and the
//     registered in-progress lists, one pipeline; bounded by the cluster's
//     concurrency);
//  2. the retry, schedule and dead sets: ZSCAN MATCH *<jid>* (Redis
//     filters, as Ruby's JobSet#find_job);
//  3. the queues: a script scans each in chunks inside Redis and returns
//     only the entries holding the jid, so a queue of 200,000 jobs costs
//     no transfer, and Redis is never held for more than one chunk;
//  4. the running jobs again: a job may have left its queue for a process
//     while 2 and 3 ran. Then the in-progress lists of gone processes.
//
// A job moving meanwhile is found in its new place: sets are read before
// queues (the poller and "retry now" move set → queue), queues before the
// second look at the running jobs (fetch moves queue → list).
func (a *API) Locate(ctx context.Context, jid string) (*Location, error) {
	if jid == "" {
		return nil, errors.New("sidekiq: locate: jid is required")
	}
	view, err := a.readRunning(ctx)
	if err != nil {
		return nil, err
	}
	if loc := runningLocation(view.work, jid); loc != nil {
		return loc, nil
	}
	for _, s := range []*JobSet{a.RetrySet(), a.ScheduledSet(), a.DeadSet()} {
		en, err := s.FindJob(ctx, jid)
		if errors.Is(err, ErrJobNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &Location{Where: s.Name(), Queue: en.Queue, At: en.At(), Raw: en.Value, Job: en.Job, Entry: en}, nil
	}
	queues, err := a.Queues(ctx)
	if err != nil {
		return nil, err
	}
	for _, q := range queues {
		rec, err := q.locate(ctx, jid)
		if err != nil {
			return nil, err
		}
		if rec != nil {
			return &Location{Where: "queue", Queue: q.Name(), Raw: rec.Value, Job: rec.Job}, nil
		}
	}
	if view, err = a.readRunning(ctx); err != nil {
		return nil, err
	}
	if loc := runningLocation(view.work, jid); loc != nil {
		return loc, nil
	}
	for _, w := range view.orphans {
		if w.Payload != nil && w.Payload.JID() == jid {
			return &Location{Where: "orphaned", Queue: w.Queue, Process: w.Identity, List: w.List, Raw: w.PayloadRaw, Job: w.Payload}, nil
		}
	}
	return nil, nil
}

func runningLocation(work []*Work, jid string) *Location {
	for _, w := range work {
		if w.Payload != nil && w.Payload.JID() == jid {
			return &Location{Where: "running", Queue: w.Queue, Process: w.Identity, TID: w.TID, List: w.List,
				At: w.RunAt, StartedAfter: w.StartedAfter, Raw: w.PayloadRaw, Job: w.Payload}
		}
	}
	return nil
}

// queueSearchChunk is how many entries of a queue one run of
// queueSearchScript reads.
const queueSearchChunk = 2000

// queueSearchScript returns the entries of KEYS[1] from index ARGV[2],
// ARGV[3] of them, that contain ARGV[1], and the index to go on from (-1
// at the end). The search walks from the head (LPUSH's end): a push
// meanwhile shifts entries towards higher indexes, so one may be seen
// twice but none is skipped; pops take from the other end.
var (
	//go:embed lua/queue_search.lua
	queueSearchLua    string
	queueSearchScript = redis.NewScript(1, queueSearchLua)
)

// locate finds the job jid in the queue (queueSearchScript), nil when it
// is not there.
func (q *Queue) locate(ctx context.Context, jid string) (*JobRecord, error) {
	conn, err := q.api.conn(ctx, "find job")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	want := map[string]bool{jid: true}
	key := contract.QueueKey(q.name)
	for from := int64(0); from >= 0; {
		reply, err := redis.Values(queueSearchScript.DoContext(ctx, conn, key, jid, from, queueSearchChunk))
		if err != nil {
			return nil, fmt.Errorf("sidekiq: find job %s in queue %s: %w", jid, q.name, err)
		}
		if len(reply) != 2 {
			return nil, fmt.Errorf("sidekiq: find job %s in queue %s: reply of %d elements", jid, q.name, len(reply))
		}
		if from, err = redis.Int64(reply[0], nil); err != nil {
			return nil, fmt.Errorf("sidekiq: find job %s in queue %s: %w", jid, q.name, err)
		}
		found, _ := redis.ByteSlices(reply[1], nil)
		for _, v := range found {
			if _, ok := contract.MemberJID(v, want); ok {
				return newJobRecord(v, q.name), nil
			}
		}
	}
	return nil, nil
}
