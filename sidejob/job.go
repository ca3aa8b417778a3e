package sidejob

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// Job is a handle on a SideJob job (SideJob::Job and the JobMethods that
// workers share). It holds only the id; every method reads Redis, so two
// handles on the same id are interchangeable. Nearly every method fails with
// ErrJobNotFound (errors.Is) once the job is deleted, as Ruby's check_exists does.
type Job struct {
	c  *Client
	id int64
}

// job returns a handle on job id without checking that it exists. Most of
// its methods fail with ErrJobNotFound (errors.Is) when it does not.
func (c *Client) job(id int64) *Job { return &Job{c: c, id: id} }

// ID returns the job id.
func (j *Job) ID() int64 { return j.id }

// String returns "job:<id>" (Ruby's redis_key and to_s).
func (j *Job) String() string { return sidejobwire.JobKey(j.id) }

func (j *Job) key(suffix string) string { return sidejobwire.JobKey(j.id) + ":" + suffix }

// exists reports whether the job exists (SISMEMBER jobs id).
func (j *Job) exists(ctx context.Context) (bool, error) {
	ok, err := redis.Bool(j.c.do(ctx, "SISMEMBER", sidejobwire.KeyJobs, j.id))
	if err != nil {
		return false, fmt.Errorf("sidejob: job %d exists?: %w", j.id, err)
	}
	return ok, nil
}

func (j *Job) checkExists(ctx context.Context) error {
	ok, err := j.exists(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return &jobNotFoundError{ID: j.id}
	}
	return nil
}

// Find looks a job up by alias, then by decimal id (aliases start with a
// letter, so an id is never taken for one): Find(ctx, "myalias") or
// Find(ctx, strconv.FormatInt(id, 10)). It returns nil, nil when there is
// no such job. Unlike Ruby's SideJob.find, Redis errors are
// returned, not swallowed.
func (c *Client) Find(ctx context.Context, aliasOrID string) (*Job, error) {
	conn, err := c.conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ref := aliasOrID
	got, err := redis.String(redis.DoContext(conn, ctx, "HGET", sidejobwire.KeyAliases, aliasOrID))
	switch {
	case err == nil:
		ref = got
	case !errors.Is(err, redis.ErrNil):
		return nil, fmt.Errorf("sidejob: find %q: %w", aliasOrID, err)
	}
	id, ok := rubyToI(ref)
	if !ok {
		return nil, nil
	}
	exists, err := redis.Bool(redis.DoContext(conn, ctx, "SISMEMBER", sidejobwire.KeyJobs, id))
	if err != nil {
		return nil, fmt.Errorf("sidejob: find %q: %w", aliasOrID, err)
	}
	if !exists {
		return nil, nil
	}
	return c.job(id), nil
}

// ignoreGone drops a *jobNotFoundError: the middleware and the reaper leave
// a job that was deleted under them alone.
func ignoreGone(err error) error {
	if errors.Is(err, ErrJobNotFound) {
		return nil
	}
	return err
}

// errAlias is matched by the errors of AddAlias.
var errAlias = errors.New("sidejob: alias")

// AddAlias gives the job an alias name (it must start with a letter).
// Adding an alias the job already has is a no-op; an alias held by another
// job is an error.
func (j *Job) AddAlias(ctx context.Context, name string) error {
	if err := j.checkExists(ctx); err != nil {
		return err
	}
	if !validAlias(name) {
		return fmt.Errorf("%w: invalid alias name %q (it must start with a letter)", errAlias, name)
	}
	set, err := redis.Bool(j.c.do(ctx, "HSETNX", sidejobwire.KeyAliases, name, j.id))
	if err != nil {
		return fmt.Errorf("sidejob: job %d add alias: %w", j.id, err)
	}
	if !set {
		owner, err := redis.String(j.c.do(ctx, "HGET", sidejobwire.KeyAliases, name))
		if err != nil && !errors.Is(err, redis.ErrNil) {
			return fmt.Errorf("sidejob: job %d add alias: %w", j.id, err)
		}
		if owner != strconv.FormatInt(j.id, 10) {
			return fmt.Errorf("%w: %q is already used by job %s", errAlias, name, owner)
		}
	}
	if _, err := j.c.do(ctx, "SADD", j.key("aliases"), name); err != nil {
		return fmt.Errorf("sidejob: job %d add alias: %w", j.id, err)
	}
	return nil
}

func validAlias(name string) bool {
	if name == "" {
		return false
	}
	ch := name[0]
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')
}

// Info is what the job's keys say about it: its status, worker, aliases
// and timestamps.
type Info struct {
	// Status is the job's status ("" when the key is missing).
	Status string
	Queue  string
	Class  string
	// Args are the worker args (JSON null when the job was queued without
	// args).
	Args rubyjson.Value
	// CreatedBy is free text ("job:<id>" for child jobs, "" when not given).
	CreatedBy string
	// CreatedAt and RanAt are SideJob timestamps; RanAt is "" when the job
	// has never run.
	CreatedAt string
	RanAt     string
	// Aliases are the job's alias names ([] when none).
	Aliases []string
}

// Info returns the job's info (Ruby's info hash, with its status and
// aliases), read in one round trip.
func (j *Job) Info(ctx context.Context) (*Info, error) {
	if err := j.checkExists(ctx); err != nil {
		return nil, err
	}
	replies, err := j.c.pipeline(ctx,
		command("GET", j.key("worker")),
		command("GET", j.key("created_by")),
		command("GET", j.key("created_at")),
		command("GET", j.key("ran_at")),
		command("GET", j.key("status")),
		command("SMEMBERS", j.key("aliases")))
	if err != nil {
		return nil, fmt.Errorf("sidejob: job %d info: %w", j.id, err)
	}
	w, err := parseWorkerKey(replies[0])
	if err != nil {
		return nil, fmt.Errorf("sidejob: job %d info: %w", j.id, err)
	}
	info := &Info{Queue: w.queue, Class: w.class, Args: w.args}
	info.CreatedBy, _ = redis.String(replies[1], nil)
	info.CreatedAt, _ = redis.String(replies[2], nil)
	info.RanAt, _ = redis.String(replies[3], nil)
	info.Status, _ = redis.String(replies[4], nil)
	if info.Aliases, _ = redis.Strings(replies[5], nil); info.Aliases == nil {
		info.Aliases = []string{}
	}
	return info, nil
}

// workerKey is the parsed job:<id>:worker.
type workerKey struct {
	queue, class string
	args         rubyjson.Value
}

func parseWorkerKey(reply any) (*workerKey, error) {
	raw, err := redis.Bytes(reply, nil)
	if err != nil {
		if errors.Is(err, redis.ErrNil) {
			return nil, errors.New("no worker key")
		}
		return nil, err
	}
	m, err := rubyjson.ParseObject(raw)
	if err != nil {
		return nil, fmt.Errorf("worker key: %w", err)
	}
	w := &workerKey{}
	v, _ := m.Get("queue")
	w.queue, _ = v.Str()
	v, _ = m.Get("class")
	w.class, _ = v.Str()
	w.args, _ = m.Get("args")
	return w, nil
}

// workerConfig returns the registered config of the job's worker class, or
// nil when the class is not registered in its queue (or the job has no
// worker key).
func (j *Job) workerConfig(ctx context.Context) (*rubyjson.Map, error) {
	reply, err := j.c.do(ctx, "GET", j.key("worker"))
	if err != nil {
		return nil, fmt.Errorf("sidejob: job %d worker: %w", j.id, err)
	}
	if reply == nil {
		return nil, nil
	}
	w, err := parseWorkerKey(reply)
	if err != nil {
		return nil, fmt.Errorf("sidejob: job %d: %w", j.id, err)
	}
	return j.c.workerConfig(ctx, w.queue, w.class)
}

// workerConfig returns the config of class in workers:<queue>, or nil when
// it is not registered (Worker.config).
func (c *Client) workerConfig(ctx context.Context, queue, class string) (*rubyjson.Map, error) {
	raw, err := redis.Bytes(c.do(ctx, "HGET", sidejobwire.WorkersKey(queue), class))
	if errors.Is(err, redis.ErrNil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sidejob: worker config %s/%s: %w", queue, class, err)
	}
	m, err := rubyjson.ParseObject(raw)
	if err != nil {
		return nil, fmt.Errorf("sidejob: worker config %s/%s: %w", queue, class, err)
	}
	return m, nil
}
