package jobctl

import (
	"context"
	"errors"
	"time"

	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Location is where a job is (Locate).
type Location struct {
	// Where is "running", "queue", "schedule", "retry" or "dead".
	Where string
	// Queue is its queue.
	Queue string
	// Process is the identity of the process running it.
	Process string
	// At is when it started (running), or its set's score: when it runs
	// (schedule, retry) or died (dead). Zero in a queue.
	At time.Time
	// Raw is the payload as stored; Job is it parsed, nil when it is not
	// a JSON object.
	Raw []byte
	Job *wire.Job
}

// Locate finds the job jid: in the work of the live processes, then the
// queues, then the schedule, retry and dead sets. It returns nil, nil when
// the job is in none of them.
func Locate(ctx context.Context, a *api.API, jid string) (*Location, error) {
	work, err := a.WorkSet(ctx)
	if err != nil {
		return nil, err
	}
	for _, w := range work {
		if w.Payload != nil && w.Payload.JID() == jid {
			return &Location{Where: "running", Queue: w.Queue, Process: w.Identity, At: w.RunAt, Raw: w.PayloadRaw, Job: w.Payload}, nil
		}
	}
	queues, err := a.Queues(ctx)
	if err != nil {
		return nil, err
	}
	for _, q := range queues {
		rec, err := q.FindJob(ctx, jid)
		if errors.Is(err, api.ErrJobNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &Location{Where: "queue", Queue: q.Name(), Raw: rec.Value, Job: rec.Job}, nil
	}
	for _, s := range []*api.JobSet{a.ScheduledSet(), a.RetrySet(), a.DeadSet()} {
		en, err := s.FindJob(ctx, jid)
		if errors.Is(err, api.ErrJobNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		loc := &Location{Where: s.Name(), At: en.At(), Raw: en.Value, Job: en.Job}
		if en.Job != nil {
			loc.Queue = en.Job.Queue()
		}
		return loc, nil
	}
	return nil, nil
}
