// Package top is `gojob top`: a terminal dashboard of a Sidekiq cluster
// (queues, processes, running jobs, set sizes, rates) read through
// sidekiq/api, so it shows Ruby processes as well as gojob's, with keys to
// pause a queue and quiet a process.
//
// The model (Model, a Bubble Tea model) holds what is shown and turns keys
// into actions; Render lays a state out in a given width and height, so
// both are tested without a terminal. A Source reads snapshots and acts on
// Redis: APISource in production, a fake in tests.
package top

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/cli/internal/procsignal"
	"github.com/gojob/gojob/sidekiq/api"
)

// Snapshot is the cluster at one moment.
type Snapshot struct {
	At time.Time `json:"at"`
	// Processed and Failed are Sidekiq's all-time counters (stat:processed,
	// stat:failed); rates are their differences between two snapshots.
	Processed int64 `json:"processed"`
	Failed    int64 `json:"failed"`
	// Enqueued is the sum of the queues' sizes; Scheduled, Retries and Dead
	// the sizes of the sets.
	Enqueued  int64 `json:"enqueued"`
	Scheduled int64 `json:"scheduled"`
	Retries   int64 `json:"retries"`
	Dead      int64 `json:"dead"`
	// Busy is the number of running jobs the processes' heartbeats report.
	Busy      int64      `json:"busy"`
	Queues    []Queue    `json:"queues"`
	Processes []Process  `json:"processes"`
	Jobs      []BusyJob  `json:"jobs"`
	Rates     *RatesJSON `json:"rates,omitempty"`
}

// RatesJSON is the rates a snapshot was printed with (--once --json).
type RatesJSON struct {
	Processed float64 `json:"processed_per_second"`
	Failed    float64 `json:"failed_per_second"`
}

// Queue is a queue, sorted by name.
type Queue struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
	// Latency is the age of its oldest job; negative when that job cannot
	// be read. JSON has it in seconds (null when unknown), as gojob queues.
	Latency time.Duration `json:"-"`
	// Paused is gojob's pause (gojob queue pause, docs/queue-pause.md).
	Paused bool `json:"paused"`
}

// MarshalJSON writes the latency in seconds.
func (q Queue) MarshalJSON() ([]byte, error) {
	type plain Queue
	out := struct {
		plain
		Latency *float64 `json:"latency"`
	}{plain: plain(q)}
	if q.Latency >= 0 {
		s := q.Latency.Seconds()
		out.Latency = &s
	}
	return json.Marshal(out)
}

// Process is a live process, Ruby's or gojob's, sorted by identity.
type Process struct {
	Identity    string    `json:"identity"`
	Tag         string    `json:"tag,omitempty"`
	Version     string    `json:"version,omitempty"`
	Busy        int64     `json:"busy"`
	Concurrency int64     `json:"concurrency"`
	Quiet       bool      `json:"quiet"`
	Embedded    bool      `json:"embedded,omitempty"`
	Beat        time.Time `json:"beat"`
	StartedAt   time.Time `json:"started_at"`
}

// BusyJob is a running job, the longest-running first.
type BusyJob struct {
	Identity string `json:"identity"`
	TID      string `json:"tid"`
	JID      string `json:"jid"`
	// Class is what runs: an ActiveJob's job class rather than its
	// wrapper's.
	Class string    `json:"class"`
	Queue string    `json:"queue"`
	RunAt time.Time `json:"run_at"`
	// StartedAfter is, for a job too new for its process's work hash
	// (RunAt zero), the heartbeat it started after (api.Running).
	StartedAfter time.Time `json:"started_after,omitzero"`
}

// Source reads snapshots and acts on the cluster.
type Source interface {
	Snapshot(ctx context.Context) (*Snapshot, error)
	// SetPaused pauses or unpauses a queue for gojob processes.
	SetPaused(ctx context.Context, queue string, paused bool) error
	// Quiet asks a process to stop fetching (TSTP), as the Web UI's Quiet.
	Quiet(ctx context.Context, identity string) error
}

// APISource is the Source of a Redis, through sidekiq/api.
type APISource struct {
	API *api.API
	// Pool is the Redis of API, for Quiet.
	Pool *redis.Pool
}

// Snapshot reads the cluster: stats, paused queues, each queue's latency,
// processes and their work.
func (s *APISource) Snapshot(ctx context.Context) (*Snapshot, error) {
	st, err := s.API.Stats(ctx)
	if err != nil {
		return nil, err
	}
	snap := &Snapshot{At: time.Now().UTC(), Processed: st.Processed, Failed: st.Failed, Enqueued: st.Enqueued,
		Scheduled: st.Scheduled, Retries: st.Retries, Dead: st.Dead, Busy: st.Busy}
	paused, err := s.API.PausedQueues(ctx)
	if err != nil {
		return nil, err
	}
	isPaused := map[string]bool{}
	for _, q := range paused {
		isPaused[q] = true
	}
	for _, q := range st.Queues {
		lat, err := s.API.Queue(q.Name).Latency(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			lat = -1 // its oldest job is not JSON: shown as unknown
		}
		snap.Queues = append(snap.Queues, Queue{Name: q.Name, Size: q.Size, Latency: lat, Paused: isPaused[q.Name]})
		delete(isPaused, q.Name)
	}
	// A paused queue that is not in the queues set (emptied) stays listed,
	// to be unpaused.
	for q := range isPaused {
		snap.Queues = append(snap.Queues, Queue{Name: q, Paused: true})
	}
	slices.SortFunc(snap.Queues, func(a, b Queue) int { return cmp.Compare(a.Name, b.Name) })
	procs, err := s.API.Processes(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range procs {
		v, _ := p.Attributes.Get("version")
		version, _ := v.Str()
		snap.Processes = append(snap.Processes, Process{Identity: p.Identity, Tag: p.Tag, Version: version,
			Busy: p.Busy, Concurrency: p.Concurrency, Quiet: p.Stopping, Embedded: p.Embedded, Beat: p.Beat.UTC(),
			StartedAt: p.StartedAt.UTC()})
	}
	slices.SortFunc(snap.Processes, func(a, b Process) int { return cmp.Compare(a.Identity, b.Identity) })
	work, err := s.API.Running(ctx)
	if err != nil {
		return nil, err
	}
	for _, w := range work {
		j := BusyJob{Identity: w.Identity, TID: w.TID, Queue: w.Queue, RunAt: w.RunAt.UTC(), Class: "?"}
		if w.RunAt.IsZero() {
			j.RunAt = time.Time{}
			j.StartedAfter = w.StartedAfter.UTC()
		}
		if w.Payload != nil {
			j.JID, j.Class = w.Payload.JID(), (&api.JobRecord{Job: w.Payload}).DisplayClass()
		}
		snap.Jobs = append(snap.Jobs, j)
	}
	return snap, nil
}

// SetPaused is `gojob queue pause|unpause`.
func (s *APISource) SetPaused(ctx context.Context, queue string, paused bool) error {
	if paused {
		return s.API.Queue(queue).Pause(ctx)
	}
	return s.API.Queue(queue).Unpause(ctx)
}

// ErrNoProcess is Quiet's error for a process that is gone.
var ErrNoProcess = errors.New("no such live process")

// Quiet is `gojob quiet IDENTITY`.
func (s *APISource) Quiet(ctx context.Context, identity string) error {
	err := procsignal.Send(ctx, s.Pool, identity, "TSTP")
	if errors.Is(err, procsignal.ErrNotLive) {
		return ErrNoProcess
	}
	return err
}
