package cron

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/google/uuid"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/cronschedule"
	"github.com/gojob/gojob/internal/redisreply"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

var (
	//go:embed lua/enqueue.lua
	enqueueSrc    string
	enqueueScript = redis.NewScript(5, enqueueSrc)

	//go:embed lua/seed_enqueued.lua
	seedEnqueuedSrc    string
	seedEnqueuedScript = redis.NewScript(1, seedEnqueuedSrc)
)

// ErrNotFound is returned for a job name the schedule does not have.
var ErrNotFound = errors.New("cron: no such job")

// Store reads and writes the schedule in the gem's layout and pushes its
// jobs through a Sidekiq client.
type Store struct {
	Client *sidekiq.Client
	Layout Layout
	// HistorySize is how many pushes jid_history keeps (the gem's
	// cron_history_size, default 10).
	HistorySize int
	// Location evaluates crons without a zone (default: time.Local, as
	// fugit uses the process's zone).
	Location *time.Location
}

func (s *Store) pool() *redis.Pool  { return s.Client.Pool() }
func (s *Store) clock() clock.Clock { return s.Client.Clock() }

func (s *Store) historySize() int {
	if s.HistorySize <= 0 {
		return 10
	}
	return s.HistorySize
}

// Save writes j as the gem's save does: SADD to the set, HSET every field,
// and, when the job has no enqueued set yet, a claim of its latest tick
// (score now) so that a new job does not fire the tick just past. A job
// saved without a status or last enqueue keeps those of Redis: use
// SaveKeeping for schedule files.
func (s *Store) Save(ctx context.Context, j *Job) error {
	if err := j.validate(); err != nil {
		return err
	}
	sched, _ := cronschedule.Parse(j.Cron)
	conn, err := s.pool().GetContext(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	now := s.clock().Now()
	key := s.Layout.jobKey(j.Name)
	conn.Send("SADD", s.Layout.setKey(), key)
	conn.Send("HSET", append([]any{key}, j.fields(s.Layout)...)...)
	if tick, ok := latestTick(sched, now, s.Location); ok {
		// EXISTS-then-ZADD as the gem does, as one step.
		seedEnqueuedScript.Send(conn, s.Layout.enqueuedKey(j.Name), contract.Score(now), tickMember(tick))
	}
	_, err = redisreply.Pipeline(ctx, conn)
	return err
}

// latestTick is fugit's previous_time(now) without a bound on age.
func latestTick(sched *cronschedule.Schedule, now time.Time, loc *time.Location) (time.Time, bool) {
	for _, w := range []time.Duration{2 * time.Minute, 2 * time.Hour, 50 * time.Hour, 40 * 24 * time.Hour, 800 * 24 * time.Hour} {
		if t, ok := sched.Previous(now, w, loc); ok {
			return t, true
		}
	}
	return time.Time{}, false
}

// tickMember is the enqueued set's member for tick: Ruby's
// Time#getutc.iso8601, whole seconds with a Z.
func tickMember(tick time.Time) string { return tick.UTC().Format("2006-01-02T15:04:05Z") }

// List returns every job of the layout's set, sorted as the gem's UI sorts
// them (enabled first, then by name).
func (s *Store) List(ctx context.Context) ([]*Job, error) {
	conn, err := s.pool().GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	keys, err := redis.Strings(redis.DoContext(conn, ctx, "SMEMBERS", s.Layout.setKey()))
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		conn.Send("HGETALL", k)
	}
	replies, err := redisreply.Pipeline(ctx, conn)
	if err != nil {
		return nil, err
	}
	var jobs []*Job
	for _, r := range replies {
		h, err := redis.StringMap(r, nil)
		if err != nil || len(h) == 0 {
			continue // a dangling set member, as the gem skips it
		}
		jobs = append(jobs, jobFromHash(h))
	}
	sort.Slice(jobs, func(a, b int) bool {
		if jobs[a].Enabled != jobs[b].Enabled {
			return jobs[a].Enabled
		}
		return jobs[a].Name < jobs[b].Name
	})
	return jobs, nil
}

// Find returns job name.
func (s *Store) Find(ctx context.Context, name string) (*Job, error) {
	conn, err := s.pool().GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	h, err := redis.StringMap(redis.DoContext(conn, ctx, "HGETALL", s.Layout.jobKey(name)))
	if err != nil {
		return nil, err
	}
	if len(h) == 0 {
		return nil, fmt.Errorf("%w: %q (%s)", ErrNotFound, name, s.Layout)
	}
	return jobFromHash(h), nil
}

// SetEnabled enables or disables job name (the gem's enable!/disable!,
// which rewrite the status field): one script, so a job deleted meanwhile
// is not recreated as a bare hash.
func (s *Store) SetEnabled(ctx context.Context, name string, enabled bool) error {
	status := "disabled"
	if enabled {
		status = "enabled"
	}
	conn, err := s.pool().GetContext(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	n, err := redis.Int(redis.DoContext(conn, ctx, "EVAL",
		`if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end redis.call('HSET', KEYS[1], 'status', ARGV[1]) return 1`,
		1, s.Layout.jobKey(name), status))
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: %q (%s)", ErrNotFound, name, s.Layout)
	}
	return nil
}

// Delete removes job name and its enqueued set and history (the gem's
// destroy), in one round trip.
func (s *Store) Delete(ctx context.Context, name string) error {
	conn, err := s.pool().GetContext(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.Send("SREM", s.Layout.setKey(), s.Layout.jobKey(name))
	conn.Send("DEL", s.Layout.enqueuedKey(name))
	conn.Send("DEL", s.Layout.historyKey(name))
	conn.Send("DEL", s.Layout.jobKey(name))
	replies, err := redis.Ints(redis.DoContext(conn, ctx, ""))
	if err != nil {
		return err
	}
	if replies[3] == 0 {
		return fmt.Errorf("%w: %q (%s)", ErrNotFound, name, s.Layout)
	}
	return nil
}

// RunNow pushes job name at once, as the gem's "Enqueue now" (enqueue!):
// no tick is claimed; last_enqueue_time and the history are written.
func (s *Store) RunNow(ctx context.Context, name string) (string, error) {
	j, err := s.Find(ctx, name)
	if err != nil {
		return "", err
	}
	jid, _, err := s.enqueue(ctx, j, time.Time{})
	return jid, err
}

// enqueue pushes j, claiming tick first unless tick is zero, in one script.
// It returns the jid ("" when the tick was taken or middleware stopped the
// push) and whether it pushed.
func (s *Store) enqueue(ctx context.Context, j *Job, tick time.Time) (string, bool, error) {
	job, err := s.payload(j)
	if err != nil {
		return "", false, err
	}
	queue, payload, ok, err := s.Client.PushPayload(ctx, job)
	if err != nil || !ok {
		return "", false, err
	}
	now := s.clock().Now().UTC()
	last := now.Format(lastEnqueueFormat)
	entry := rubyjson.NewMap()
	entry.Set("jid", rubyjson.StringValue(job.JID()))
	if s.Layout.V1 {
		entry.Set("enqueued", rubyjson.StringValue(last))
	} else {
		entry.Set("enqueued", rubyjson.StringValue(now.Format("2006-01-02 15:04:05 UTC")))
	}
	history := entry.Encode()
	score, member, trim := "", "", ""
	if !tick.IsZero() {
		score, member = contract.Score(tick), tickMember(tick)
		trim = "(" + contract.Score(now.Add(-24*time.Hour))
	}
	conn, err := s.pool().GetContext(ctx)
	if err != nil {
		return "", false, err
	}
	defer conn.Close()
	r, err := redis.Int(enqueueScript.DoContext(ctx, conn,
		s.Layout.enqueuedKey(j.Name), s.Layout.jobKey(j.Name), s.Layout.historyKey(j.Name),
		contract.QueueKey(queue), contract.KeyQueues,
		score, member, payload, queue, last, history, s.historySize()-1, trim))
	switch {
	case err != nil:
		return "", false, err
	case r == -1:
		return "", false, fmt.Errorf("%w: %q (deleted meanwhile)", ErrNotFound, j.Name)
	case r == 0:
		return "", false, nil
	}
	return job.JID(), true, nil
}

// payload builds the job the gem pushes: for a Sidekiq job class, what
// `Class.set(queue: …).perform_async(*args)` writes (the gem's
// enqueue_sidekiq_worker, sidekiq-cron 1.8.0 and 2.x): the message's
// options, then args, then class (Sidekiq's Setter merges the options
// before args and class); or ActiveJob's JobWrapper.
func (s *Store) payload(j *Job) (*wire.Job, error) {
	args := rubyjson.ArrayValue()
	if j.Args != "" {
		v, err := rubyjson.Parse([]byte(j.Args))
		if err != nil || v.Kind() != rubyjson.Array {
			return nil, fmt.Errorf("cron job %s: args are not a JSON array: %q", j.Name, j.Args)
		}
		args = v
	}
	if j.DateAsArgument {
		vals, _ := args.Array()
		args = rubyjson.ArrayValue(append(vals, rubyjson.FloatValue(contract.EpochSeconds(s.clock().Now())))...)
	}
	if j.ActiveJob {
		q := j.Queue()
		if j.QueuePrefix != "" {
			d := j.QueueDelimiter
			if d == "" {
				d = "_"
			}
			q = j.QueuePrefix + d + q
		}
		inner := rubyjson.NewMap()
		inner.Set("job_class", rubyjson.StringValue(j.Class))
		inner.Set("job_id", rubyjson.StringValue(uuid.NewString()))
		inner.Set("queue_name", rubyjson.StringValue(q))
		inner.Set("arguments", args)
		m := rubyjson.NewMap()
		m.Set("class", rubyjson.StringValue("ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper"))
		m.Set("wrapped", rubyjson.StringValue(j.Class))
		m.Set("queue", rubyjson.StringValue(q))
		m.Set("description", rubyjson.StringValue(j.Description))
		m.Set("args", rubyjson.ArrayValue(rubyjson.ObjectValue(inner)))
		return wire.JobFromMap(m), nil
	}
	msg := j.Message
	if msg == "" {
		msg = "{}"
	}
	m, err := rubyjson.ParseObject([]byte(msg))
	if err != nil {
		return nil, fmt.Errorf("cron job %s: message is not a JSON object: %w", j.Name, err)
	}
	class, ok := m.Get("class")
	if !ok {
		class = rubyjson.StringValue(j.Class)
	}
	out := rubyjson.NewMap()
	for i := range m.Len() {
		if k, v := m.At(i); k != "class" && k != "args" {
			out.Set(k, v)
		}
	}
	out.Set("args", args)
	out.Set("class", class)
	return wire.JobFromMap(out), nil
}

// Sync makes Redis hold the schedule file's jobs, as the gem's schedule
// loader does: each is saved (keeping the status and last enqueue in Redis
// unless the file sets the status), and jobs of source "schedule" that the
// file no longer has are deleted; "dynamic" jobs are left alone.
func (s *Store) Sync(ctx context.Context, jobs []*Job) error {
	names := map[string]bool{}
	for _, j := range jobs {
		names[j.Name] = true
		if old, err := s.Find(ctx, j.Name); err == nil {
			if !j.statusSet {
				j.Enabled = old.Enabled
			}
			j.LastEnqueue = old.LastEnqueue
		} else if !errors.Is(err, ErrNotFound) {
			return err
		}
		if err := s.Save(ctx, j); err != nil {
			return err
		}
	}
	all, err := s.List(ctx)
	if err != nil {
		return err
	}
	for _, j := range all {
		if j.Source == "schedule" && !names[j.Name] {
			if err := s.Delete(ctx, j.Name); err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
		}
	}
	return nil
}
