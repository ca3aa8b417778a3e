package sidejob

// Operations of the sidejob gem that the Go API does not offer but the
// tests use to build and inspect state as Ruby processes would.

import (
	"context"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// load returns the job with this id, or a *jobNotFoundError.
func (c *Client) load(ctx context.Context, id int64) (*Job, error) {
	j := c.job(id)
	ok, err := j.exists(ctx)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &jobNotFoundError{ID: id}
	}
	return j, nil
}

// connectTo moves all of the port's data to dests (Port#connect_to,
// docs/sidejob.md#port-operations): the source list and default are read and the list deleted
// atomically; the raw envelopes (with their original context and options)
// are appended to every destination, and the source's default is copied to
// every destination whose default differs. When data moved, one log entry
// records the reads and writes, and each value is published to the
// channels of destination outports. Each destination's job (inport) or its
// parent (outport) is run when data moved or its default changed. It returns
// the moved values, oldest first. Port-group Notify/SetDefault options do not
// apply, as in Ruby.
func (p *Port) connectTo(ctx context.Context, dests ...*Port) ([]*Data, error) {
	c := p.job.c
	replies, err := c.multi(ctx,
		command("HGET", p.defaultKey(), p.name),
		command("LRANGE", p.String(), 0, -1),
		command("DEL", p.String()))
	if err != nil {
		return nil, fmt.Errorf("sidejob: connect %s: %w", p, err)
	}
	def, _ := redis.Bytes(replies[0], nil)
	raws, err := redis.ByteSlices(replies[1], nil)
	if err != nil {
		return nil, fmt.Errorf("sidejob: connect %s: %w", p, err)
	}
	if len(raws) == 0 && def == nil {
		return []*Data{}, nil
	}
	data := make([]*Data, len(raws))
	for i, raw := range raws {
		if data[i], err = decodeData(raw); err != nil {
			return nil, err
		}
	}
	changed := make([]bool, len(dests))
	var cmds []cmd
	if def != nil && len(dests) > 0 {
		gets := make([]cmd, len(dests))
		for i, d := range dests {
			gets[i] = command("HGET", d.defaultKey(), d.name)
		}
		cur, err := c.pipeline(ctx, gets...)
		if err != nil {
			return nil, fmt.Errorf("sidejob: connect %s: %w", p, err)
		}
		for i, d := range dests {
			old, _ := redis.Bytes(cur[i], nil)
			if old == nil || string(old) != string(def) {
				changed[i] = true
				cmds = append(cmds, command("HSET", d.defaultKey(), d.name, def))
			}
		}
	}
	if len(raws) > 0 {
		for _, d := range dests {
			args := []any{d.String()}
			for _, raw := range raws {
				args = append(args, raw)
			}
			cmds = append(cmds, command("RPUSH", args...))
		}
	}
	if _, err := c.multi(ctx, cmds...); err != nil {
		return nil, fmt.Errorf("sidejob: connect %s: %w", p, err)
	}
	if len(raws) > 0 {
		err := c.inGroup(ctx, nil, func(gctx context.Context) error {
			for _, d := range data {
				if d.logged() {
					c.recordPortIO(gctx, false, p, d.Value)
				}
			}
			for _, dst := range dests {
				for _, d := range data {
					c.recordPortIO(gctx, true, dst, d.Value)
				}
			}
			return nil
		})
		if err != nil {
			return data, err
		}
		for _, dst := range dests {
			if dst.typ != outPort {
				continue
			}
			chans, err := dst.channels(ctx)
			if err != nil {
				return data, err
			}
			for _, ch := range chans {
				for _, d := range data {
					if err := c.Publish(ctx, ch, d.Value); err != nil {
						return data, err
					}
				}
			}
		}
	}
	for i, dst := range dests {
		if len(raws) == 0 && !changed[i] {
			continue
		}
		var err error
		if dst.typ == inPort {
			_, err = dst.job.Run(ctx, nil)
		} else {
			_, err = dst.job.Run(ctx, &RunOpts{Parent: true})
		}
		if err != nil {
			return data, err
		}
	}
	return data, nil
}

// disownNamed removes the child named name.
func (j *Job) disownNamed(ctx context.Context, name string) error {
	child, err := j.child(ctx, name)
	if err != nil {
		return err
	}
	if child == nil {
		return fmt.Errorf("%w: job %d has no child named %q", errNotChild, j.id, name)
	}
	return j.disown(ctx, name, child)
}

// removeAlias removes one of the job's aliases; it fails when name is not
// one of them.
func (j *Job) removeAlias(ctx context.Context, name string) error {
	if err := j.checkExists(ctx); err != nil {
		return err
	}
	ok, err := redis.Bool(j.c.do(ctx, "SISMEMBER", j.key("aliases"), name))
	if err != nil {
		return fmt.Errorf("sidejob: job %d remove alias: %w", j.id, err)
	}
	if !ok {
		return fmt.Errorf("%w: %q is not an alias of job %d", errAlias, name, j.id)
	}
	if _, err := j.c.multi(ctx, command("SREM", j.key("aliases"), name), command("HDEL", sidejobwire.KeyAliases, name)); err != nil {
		return fmt.Errorf("sidejob: job %d remove alias: %w", j.id, err)
	}
	return nil
}

// hasData reports whether a read would return something: data is waiting or
// the port has a default (Ruby's data?).
func (p *Port) hasData(ctx context.Context) (bool, error) {
	replies, err := p.job.c.pipeline(ctx, command("LLEN", p.String()), command("HEXISTS", p.defaultKey(), p.name))
	if err != nil {
		return false, fmt.Errorf("sidejob: %s data?: %w", p, err)
	}
	n, _ := redis.Int64(replies[0], nil)
	d, _ := redis.Bool(replies[1], nil)
	return n > 0 || d, nil
}

// hasDefault reports whether the port has a default (Ruby's default?).
func (p *Port) hasDefault(ctx context.Context) (bool, error) {
	ok, err := redis.Bool(p.job.c.do(ctx, "HEXISTS", p.defaultKey(), p.name))
	if err != nil {
		return false, fmt.Errorf("sidejob: %s default?: %w", p, err)
	}
	return ok, nil
}

// setChannels replaces the port's channels; an empty list removes them. For
// an inport, the job id is added to channel:<ch> for each channel. Old
// memberships are not removed: the next publish on them cleans up. (Ruby
// raises on a nil list for an inport; here nil is the same as empty.)
func (p *Port) setChannels(ctx context.Context, channels []string) error {
	var cmds []cmd
	if len(channels) == 0 {
		cmds = append(cmds, command("HDEL", p.channelsKey(), p.name))
	} else {
		cmds = append(cmds, command("HSET", p.channelsKey(), p.name, channelsJSON(channels)))
		if p.typ == inPort {
			for _, ch := range channels {
				cmds = append(cmds, command("SADD", sidejobwire.ChannelKey(ch), p.job.id))
			}
		}
	}
	if _, err := p.job.c.multi(ctx, cmds...); err != nil {
		return fmt.Errorf("sidejob: %s channels: %w", p, err)
	}
	return nil
}

// executeJob runs the middleware algorithm once for job id with the worker of
// class (docs/sidejob.md#executing-a-job).
func (rt *jobRuntime) executeJob(ctx context.Context, class string, id int64, args []rubyjson.Value) error {
	return rt.execute(ctx, class, id, args, rt.returnErrors)
}

// refreshLock resets the lock's TTL; it reports false when there is no
// lock.
func (j *Job) refreshLock(ctx context.Context, ttl time.Duration) (bool, error) {
	ok, err := redis.Bool(j.c.do(ctx, "EXPIRE", j.key("lock"), max(int64(ttl/time.Second), 1)))
	if err != nil {
		return false, fmt.Errorf("sidejob: job %d refresh lock: %w", j.id, err)
	}
	return ok, nil
}

// now returns the client's current time.
func (c *Client) now() time.Time { return c.clock.Now() }

// publish publishes msg to the job's channel, /sidejob/job/<id>.
func (j *Job) publish(ctx context.Context, msg any) error {
	return j.c.Publish(ctx, sidejobwire.JobChannel(j.id), msg)
}

func (j *Job) worker(ctx context.Context) (*workerKey, error) {
	reply, err := j.c.do(ctx, "GET", j.key("worker"))
	if err != nil {
		return nil, fmt.Errorf("sidejob: job %d worker: %w", j.id, err)
	}
	w, err := parseWorkerKey(reply)
	if err != nil {
		return nil, fmt.Errorf("sidejob: job %d: %w", j.id, err)
	}
	return w, nil
}

// equal reports whether o is the same job (by id).
func (j *Job) equal(o *Job) bool { return o != nil && o.id == j.id }

// equal reports whether p and o are the same port of the same job (names
// are case sensitive).
func (p *Port) equal(o *Port) bool {
	return o != nil && p.job.id == o.job.id && p.typ == o.typ && p.name == o.name
}

// entries drains the port and returns its values, oldest first (the default
// is not included).
func (p *Port) entries(ctx context.Context) ([]*Data, error) {
	var out []*Data
	err := p.Each(ctx, func(d *Data) error { out = append(out, d); return nil })
	return out, err
}

// unset removes state fields.
func (j *Job) unset(ctx context.Context, keys ...string) error {
	if err := j.checkExists(ctx); err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	args := []any{j.key("state")}
	for _, k := range keys {
		args = append(args, k)
	}
	if _, err := j.c.do(ctx, "HDEL", args...); err != nil {
		return fmt.Errorf("sidejob: job %d unset: %w", j.id, err)
	}
	return nil
}

// workerFunc adapts a function to Worker for the tests.
type workerFunc func(ctx context.Context, job *Job, args []rubyjson.Value) error

func (f workerFunc) Perform(ctx context.Context, job *Job, args []rubyjson.Value) error {
	return f(ctx, job, args)
}
