package sidejob

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/sidejobwire"
)

// namedChild is a child job with its name.
type namedChild struct {
	name string
	job  *Job
}

// errNotChild is matched when disownJob is given a job that is not a child.
var errNotChild = errors.New("sidejob: not a child")

// errAdopt is matched by the errors of adopt.
var errAdopt = errors.New("sidejob: cannot adopt")

// Children returns the job's children by name (Ruby's children, {name =>
// job}): children["total"] is the child named total. As in Ruby (children
// maps each id through SideJob.find), an entry whose job no longer exists
// is not a child: it is left out (Ruby maps it to nil).
func (j *Job) Children(ctx context.Context) (map[string]*Job, error) {
	kids, err := j.children(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*Job, len(kids))
	for _, ch := range kids {
		out[ch.name] = ch.job
	}
	return out, nil
}

// children returns the job's children in the order of job:<id>:children,
// the order in which the gem terminates and deletes them.
func (j *Job) children(ctx context.Context) ([]namedChild, error) {
	kv, err := redis.Strings(j.c.do(ctx, "HGETALL", j.key("children")))
	if err != nil {
		return nil, fmt.Errorf("sidejob: job %d children: %w", j.id, err)
	}
	out := make([]namedChild, 0, len(kv)/2)
	var checks []cmd
	for i := 0; i+1 < len(kv); i += 2 {
		id, ok := rubyToI(kv[i+1])
		if !ok {
			continue
		}
		out = append(out, namedChild{name: kv[i], job: j.c.job(id)})
		checks = append(checks, command("SISMEMBER", sidejobwire.KeyJobs, id))
	}
	replies, err := j.c.pipeline(ctx, checks...)
	if err != nil {
		return nil, fmt.Errorf("sidejob: job %d children: %w", j.id, err)
	}
	live := out[:0]
	for i, ch := range out {
		if ok, _ := redis.Bool(replies[i], nil); ok {
			live = append(live, ch)
		}
	}
	return live, nil
}

// child returns the child named name, or nil when there is none or its job
// no longer exists (Ruby's child is SideJob.find of the child id).
func (j *Job) child(ctx context.Context, name string) (*Job, error) {
	s, err := redis.String(j.c.do(ctx, "HGET", j.key("children"), name))
	if errors.Is(err, redis.ErrNil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sidejob: job %d child %s: %w", j.id, name, err)
	}
	id, ok := rubyToI(s)
	if !ok {
		return nil, nil
	}
	ch := j.c.job(id)
	exists, err := ch.exists(ctx)
	if err != nil || !exists {
		return nil, err
	}
	return ch, nil
}

// Parent returns the job's parent, or nil when it has none or the parent
// job no longer exists (Ruby's parent is SideJob.find(parent id)).
func (j *Job) Parent(ctx context.Context) (*Job, error) {
	s, err := redis.String(j.c.do(ctx, "GET", j.key("parent")))
	if errors.Is(err, redis.ErrNil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sidejob: job %d parent: %w", j.id, err)
	}
	id, ok := rubyToI(s)
	if !ok {
		return nil, nil
	}
	p := j.c.job(id)
	exists, err := p.exists(ctx)
	if err != nil || !exists {
		return nil, err
	}
	return p, nil
}

// adopt makes orphan a child of j under name. It fails when j does not
// exist, orphan is j, orphan already has a parent, name is empty, or j
// already has a child of that name.
func (j *Job) adopt(ctx context.Context, orphan *Job, name string) error {
	if err := j.checkAdopt(ctx, orphan, name); err != nil {
		return err
	}
	if _, err := j.c.multi(ctx,
		command("SET", orphan.key("parent"), strconv.FormatInt(j.id, 10)),
		command("HSET", j.key("children"), name, orphan.id)); err != nil {
		return fmt.Errorf("sidejob: job %d adopt %d: %w", j.id, orphan.id, err)
	}
	return nil
}

// checkAdopt validates an adoption; orphan may be nil to check only the
// parent side (before a job is created).
func (j *Job) checkAdopt(ctx context.Context, orphan *Job, name string) error {
	if err := j.checkExists(ctx); err != nil {
		return err
	}
	if name == "" {
		return fmt.Errorf("%w: missing name option for the child job", errAdopt)
	}
	if orphan != nil {
		if orphan.id == j.id {
			return fmt.Errorf("%w: job %d cannot adopt itself", errAdopt, j.id)
		}
		p, err := orphan.Parent(ctx)
		if err != nil {
			return err
		}
		if p != nil {
			return fmt.Errorf("%w: job %d is already a child of job %d", errAdopt, orphan.id, p.id)
		}
	}
	// As in Ruby (child(name) must be nil), a name whose job is gone is
	// free again.
	used, err := j.child(ctx, name)
	if err != nil {
		return err
	}
	if used != nil {
		return fmt.Errorf("%w: job %d already has a child named %q", errAdopt, j.id, name)
	}
	return nil
}

// disownJob removes child from j's children.
func (j *Job) disownJob(ctx context.Context, child *Job) error {
	children, err := j.children(ctx)
	if err != nil {
		return err
	}
	for _, ch := range children {
		if ch.job.id == child.id {
			return j.disown(ctx, ch.name, child)
		}
	}
	return fmt.Errorf("%w: job %d is not a child of job %d", errNotChild, child.id, j.id)
}

func (j *Job) disown(ctx context.Context, name string, child *Job) error {
	if _, err := j.c.multi(ctx, command("DEL", child.key("parent")), command("HDEL", j.key("children"), name)); err != nil {
		return fmt.Errorf("sidejob: job %d disown %s: %w", j.id, name, err)
	}
	return nil
}
