package sidejob

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// QueueOpts are the options of Client.Queue and Job.Queue.
type QueueOpts struct {
	// Args are passed to the worker's Perform. nil is stored as JSON null
	// (as Ruby does when args: is not given); use []any{} for [].
	Args []any
	// Parent makes the new job a child of Parent under Name (required then).
	Parent *Job
	// Name is the child name under Parent.
	Name string
	// At schedules the first run.
	At time.Time
	// By is stored in created_by (free text; "" when not given).
	By string
	// Inports and Outports declare ports as the gem's port hashes do, a
	// JSON object of port name to options, such as
	// {"in":{},"extra":{"default":[1,2],"channels":["/test/chan"]}}
	// (the form of the worker config's "inports" and "outports"; a name
	// may be "*"). They are merged over the worker config's ports; ""
	// adds none.
	Inports, Outports string
}

// Queue creates a job of class in queue and queues its first run
// (SideJob.queue, docs/sidejob.md#creating-a-job): the class must be registered in
// workers:<queue>; the job gets the next id, status completed, its
// timestamps and ports, is adopted by o.Parent, then Run moves it to queued
// and pushes it to Sidekiq.
//
// Unlike the gem, the parent, the name and the ports (names and defaults,
// merged with the worker config) are checked before the id is allocated,
// and a job whose adoption or port setup still fails (a concurrent adopt, a
// Redis error) is removed again, so no orphan is left behind (docs/sidejob.md#weakness-2-orphan-job-after-a-failed-queue).
func (c *Client) Queue(ctx context.Context, queue, class string, o *QueueOpts) (*Job, error) {
	if o == nil {
		o = &QueueOpts{}
	}
	cfg, err := c.workerConfig(ctx, queue, class)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		return nil, fmt.Errorf("%w: no worker registered for %s in queue %s", errNotRegistered, class, queue)
	}
	args := rubyjson.Value{}
	if o.Args != nil {
		if args, err = rubyjson.FromGo(o.Args); err != nil {
			return nil, fmt.Errorf("sidejob: queue %s args: %w", class, err)
		}
	}
	inports, err := parsePortDefs(o.Inports)
	if err == nil {
		_, _, err = resolvePorts(cfg, inPort, inports)
	}
	if err != nil {
		return nil, fmt.Errorf("sidejob: queue %s inports: %w", class, err)
	}
	outports, err := parsePortDefs(o.Outports)
	if err == nil {
		_, _, err = resolvePorts(cfg, outPort, outports)
	}
	if err != nil {
		return nil, fmt.Errorf("sidejob: queue %s outports: %w", class, err)
	}
	if o.Parent != nil {
		if err := o.Parent.checkAdopt(ctx, nil, o.Name); err != nil {
			return nil, err
		}
	}
	id, err := redis.Int64(c.do(ctx, "INCR", sidejobwire.KeyLastID))
	if err != nil {
		return nil, fmt.Errorf("sidejob: queue %s: %w", class, err)
	}
	j := c.job(id)
	worker := rubyjson.NewMap()
	worker.Set("queue", rubyjson.StringValue(queue))
	worker.Set("class", rubyjson.StringValue(class))
	worker.Set("args", args)
	if _, err := c.do(ctx, "SADD", sidejobwire.KeyJobs, id); err != nil {
		return nil, fmt.Errorf("sidejob: queue %s: %w", class, err)
	}
	if _, err := c.multi(ctx,
		command("SET", j.key("worker"), worker.Encode()),
		command("SET", j.key("status"), statusCompleted),
		command("SET", j.key("created_at"), c.timestamp()),
		command("SET", j.key("created_by"), o.By)); err != nil {
		j.discard(ctx, nil, "")
		return nil, fmt.Errorf("sidejob: queue %s: %w", class, err)
	}
	if o.Parent != nil {
		if err := o.Parent.adopt(ctx, j, o.Name); err != nil {
			j.discard(ctx, nil, "")
			return nil, err
		}
	}
	if err := j.setInports(ctx, inports); err != nil {
		j.discard(ctx, o.Parent, o.Name)
		return nil, err
	}
	if err := j.setOutports(ctx, outports); err != nil {
		j.discard(ctx, o.Parent, o.Name)
		return nil, err
	}
	if _, err := j.Run(ctx, &RunOpts{At: o.At}); err != nil {
		return nil, err
	}
	return j, nil
}

// discard removes a job that Queue created but could not finish setting up
// (best effort: the error that made Queue fail is the one reported). When
// parent is given, the job had been adopted under name: the parent's entry
// is removed if it still names this job.
func (j *Job) discard(ctx context.Context, parent *Job, name string) {
	ctx = context.WithoutCancel(ctx)
	if parent != nil {
		if s, err := redis.String(j.c.do(ctx, "HGET", parent.key("children"), name)); err == nil && s == strconv.FormatInt(j.id, 10) {
			j.c.do(ctx, "HDEL", parent.key("children"), name)
		}
	}
	j.removeKeys(ctx)
}

// Queue creates a child job of j (JobMethods#queue): the same as
// Client.Queue with Parent j and By "job:<id>"; o.Name is required.
func (j *Job) Queue(ctx context.Context, queue, class string, o *QueueOpts) (*Job, error) {
	opts := QueueOpts{}
	if o != nil {
		opts = *o
	}
	opts.Parent = j
	opts.By = j.String()
	return j.c.Queue(ctx, queue, class, &opts)
}
