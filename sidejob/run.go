package sidejob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// RunOpts are the options of Job.Run. A nil *RunOpts runs the job now.
type RunOpts struct {
	// Parent runs the job's parent instead (with the other options); Run
	// then returns the parent, or nil when there is none.
	Parent bool
	// Force runs the job whatever its status (the only way out of failed,
	// terminating and terminated).
	Force bool
	// At schedules the run (through Sidekiq's schedule set).
	At time.Time
	// Wait schedules the run after this delay (ignored when At is set).
	Wait time.Duration
}

// runnable are the statuses Run accepts without Force.
var runnable = []string{statusRunning, statusQueued, statusSuspended, statusCompleted}

// Run asks for a run of the job (Job#run, docs/sidejob.md#requesting-a-run): unless Force, only a
// running, queued, suspended or completed job is run (the status check and
// the change to queued are one atomic step here); the status becomes queued
// (published when it changed) and a Sidekiq item is pushed unless one is
// already waiting in the queue or a worker is taking the job's lock. It
// returns the job that was run, or nil when none was.
func (j *Job) Run(ctx context.Context, o *RunOpts) (*Job, error) {
	if o == nil {
		o = &RunOpts{}
	}
	if o.Parent {
		p, err := j.Parent(ctx)
		if err != nil || p == nil {
			return nil, err
		}
		opts := *o
		opts.Parent = false
		return p.Run(ctx, &opts)
	}
	if err := j.checkExists(ctx); err != nil {
		return nil, err
	}
	if o.Force {
		if err := j.setStatus(ctx, statusQueued); err != nil {
			return nil, err
		}
	} else {
		ok, err := j.setStatusIf(ctx, statusQueued, "in", runnable...)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, nil
		}
	}
	var at time.Time
	switch {
	case !o.At.IsZero():
		at = o.At
	case o.Wait > 0:
		at = j.c.clock.Now().Add(o.Wait)
	}
	if err := j.sidekiqQueue(ctx, at); err != nil {
		return nil, err
	}
	return j, nil
}

// errNotRegistered is matched when a job's worker class is not registered
// in its queue.
var errNotRegistered = errors.New("sidejob: worker not registered")

// sidekiqQueue pushes the job's Sidekiq item (docs/sidejob.md#requesting-a-run step 5), at a time
// when at is not zero and in the future.
func (j *Job) sidekiqQueue(ctx context.Context, at time.Time) error {
	replies, err := j.c.pipeline(ctx, command("EXISTS", j.key("lock:worker")), command("GET", j.key("worker")))
	if err != nil {
		return fmt.Errorf("sidejob: job %d queue: %w", j.id, err)
	}
	if n, _ := redis.Int(replies[0], nil); n > 0 {
		return nil
	}
	w, err := parseWorkerKey(replies[1])
	if err != nil {
		return fmt.Errorf("sidejob: job %d queue: %w", j.id, err)
	}
	found, err := j.waitingInQueue(ctx, w.queue)
	if err != nil {
		return err
	}
	if found {
		return nil
	}
	cfg, err := j.c.workerConfig(ctx, w.queue, w.class)
	if err != nil {
		return err
	}
	if cfg == nil {
		if err := j.setStatus(ctx, statusTerminated); err != nil {
			return err
		}
		return fmt.Errorf("%w: job %d: %s in queue %s", errNotRegistered, j.id, w.class, w.queue)
	}
	item := rubyjson.NewMap()
	item.Set("jid", rubyjson.IntValue(j.id))
	item.Set("queue", rubyjson.StringValue(w.queue))
	item.Set("class", rubyjson.StringValue(w.class))
	args := w.args
	if _, ok := args.Array(); !ok {
		args = rubyjson.ArrayValue()
	}
	item.Set("args", args)
	item.Set("retry", rubyjson.BoolValue(false))
	var opts *sidekiq.PushOpts
	if !at.IsZero() {
		opts = &sidekiq.PushOpts{At: at}
	}
	if _, err := j.c.sk.Push(ctx, wire.JobFromMap(item), opts); err != nil {
		return fmt.Errorf("sidejob: job %d queue: %w", j.id, err)
	}
	return nil
}

// queuePageSize is the number of entries read per LRANGE by
// waitingInQueue (Sidekiq::Queue#each reads pages of 50).
const queuePageSize = 100

// waitingInQueue reports whether an item with the job's jid waits in the
// immediate list queue:<queue>, as Sidekiq::Queue#find_job does for the
// gem's duplicate check (docs/sidejob.md#requesting-a-run step 5.2; the schedule set is not looked
// at). Like Ruby, it scans client-side, a page at a time from the head, so
// Redis is never blocked by a long queue. Items pushed meanwhile (LPUSH)
// only shift entries towards the tail and items taken by workers (BRPOP)
// leave from it, so no entry that stays in the list is skipped; a miss
// (an entry removed from the middle during the scan) only costs a
// duplicate push, which the middleware skips. The jid matches as a JSON
// integer (or an integral float, as Ruby's Integer ==) or, unlike Ruby, as
// a JSON string of the same digits (docs/sidejob.md#weakness-6-duplicate-check-of-run-requests).
func (j *Job) waitingInQueue(ctx context.Context, queue string) (bool, error) {
	key := contract.QueueKey(queue)
	digits := strconv.FormatInt(j.id, 10)
	plain := []byte(`"jid":` + digits)
	quoted := []byte(`"jid":"` + digits + `"`)
	conn, err := j.c.conn(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	for start := 0; ; start += queuePageSize {
		items, err := redis.ByteSlices(redis.DoContext(conn, ctx, "LRANGE", key, start, start+queuePageSize-1))
		if err != nil {
			return false, fmt.Errorf("sidejob: job %d queue: %w", j.id, err)
		}
		for _, raw := range items {
			if (bytes.Contains(raw, plain) || bytes.Contains(raw, quoted)) && itemHasJID(raw, j.id, digits) {
				return true, nil
			}
		}
		if len(items) < queuePageSize {
			return false, nil
		}
	}
}

// itemHasJID reports whether the Sidekiq item raw has jid id (an integer,
// an integral float, or the string digits).
func itemHasJID(raw []byte, id int64, digits string) bool {
	m, err := rubyjson.ParseObject(raw)
	if err != nil {
		return false
	}
	v, ok := m.Get("jid")
	if !ok {
		return false
	}
	if s, isStr := v.Str(); isStr {
		return s == digits
	}
	n, isInt := v.Int()
	return isInt && n == id
}

// Terminate asks the job to terminate (Job#terminate): unless it is already
// terminated, its status becomes terminating and a run is queued so that a
// worker calls its Shutdown and marks it terminated. With recursive, every
// descendant is terminated too.
func (j *Job) Terminate(ctx context.Context, recursive bool) error {
	if err := j.checkExists(ctx); err != nil {
		return err
	}
	ok, err := j.setStatusIf(ctx, statusTerminating, "notin", statusTerminated)
	if err != nil {
		return err
	}
	if ok {
		if err := j.sidekiqQueue(ctx, time.Time{}); err != nil {
			return err
		}
	}
	if recursive {
		children, err := j.children(ctx)
		if err != nil {
			return err
		}
		for _, ch := range children {
			if err := ch.job.Terminate(ctx, true); err != nil {
				return err
			}
		}
	}
	return nil
}

// terminated reports whether the job and all its descendants are
// terminated.
func (j *Job) terminated(ctx context.Context) (bool, error) {
	s, err := j.status(ctx)
	if err != nil || s != statusTerminated {
		return false, err
	}
	children, err := j.children(ctx)
	if err != nil {
		return false, err
	}
	for _, ch := range children {
		ok, err := ch.job.terminated(ctx)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// Delete deletes the job and its descendants (Job#delete) and reports
// whether it did: only a job whose whole subtree is terminated is deleted.
// The job is disowned by its parent, all its keys, port data and aliases are
// removed, then {"deleted":true} is published to its channel. As in Ruby,
// job:<id>:lock, the rate counters, channel memberships and queued Sidekiq
// items are left to expire or be skipped.
func (j *Job) Delete(ctx context.Context) (bool, error) {
	ok, err := j.terminated(ctx)
	if err != nil || !ok {
		return false, err
	}
	parent, err := j.Parent(ctx)
	if err != nil {
		return false, err
	}
	if parent != nil {
		if err := parent.disownJob(ctx, j); err != nil && !errors.Is(err, errNotChild) && !errors.Is(err, ErrJobNotFound) {
			return false, err
		}
	}
	children, err := j.children(ctx)
	if err != nil {
		return false, err
	}
	if err := j.removeKeys(ctx); err != nil {
		return false, err
	}
	for _, ch := range children {
		if _, err := ch.job.Delete(ctx); err != nil {
			return true, err
		}
	}
	m := rubyjson.NewMap()
	m.Set("deleted", rubyjson.BoolValue(true))
	return true, j.c.Publish(ctx, sidejobwire.JobChannel(j.id), rubyjson.ObjectValue(m))
}

// removeKeys removes the job from jobs and deletes its keys, port data and
// aliases in one MULTI (the key removal of Job#delete).
func (j *Job) removeKeys(ctx context.Context) error {
	replies, err := j.c.pipeline(ctx,
		command("SMEMBERS", j.key("inports")),
		command("SMEMBERS", j.key("outports")),
		command("SMEMBERS", j.key("aliases")))
	if err != nil {
		return fmt.Errorf("sidejob: delete job %d: %w", j.id, err)
	}
	inports, _ := redis.Strings(replies[0], nil)
	outports, _ := redis.Strings(replies[1], nil)
	aliases, _ := redis.Strings(replies[2], nil)
	del := []any{sidejobwire.JobKey(j.id)}
	for _, p := range inports {
		del = append(del, j.key("in:"+p))
	}
	for _, p := range outports {
		del = append(del, j.key("out:"+p))
	}
	for _, s := range []string{"worker", "status", "state", "aliases", "parent", "children",
		"inports", "outports", "inports:default", "outports:default", "inports:channels",
		"outports:channels", "created_at", "created_by", "ran_at"} {
		del = append(del, j.key(s))
	}
	cmds := []cmd{command("SREM", sidejobwire.KeyJobs, j.id), command("DEL", del...)}
	for _, a := range aliases {
		cmds = append(cmds, command("HDEL", sidejobwire.KeyAliases, a))
	}
	if _, err := j.c.multi(ctx, cmds...); err != nil {
		return fmt.Errorf("sidejob: delete job %d: %w", j.id, err)
	}
	return nil
}
