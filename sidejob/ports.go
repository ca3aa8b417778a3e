package sidejob

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// portType tells input ports from output ports.
type portType int

// Port types.
const (
	inPort portType = iota
	outPort
)

// String returns "in" or "out", as in the Redis keys.
func (t portType) String() string {
	if t == outPort {
		return "out"
	}
	return "in"
}

// errNoPort is matched by errors about a port that does not exist.
var errNoPort = errors.New("sidejob: no such port")

var portNameRE = regexp.MustCompile(`\A[a-zA-Z0-9_]+\z`)

// Port is an input or output port of a job (SideJob::Port). Its data is a
// Redis list of envelopes, oldest first; it may have a default value that a
// read returns when the list is empty, and channels (inports subscribe to
// them; outports publish what is written to them).
type Port struct {
	job  *Job
	typ  portType
	name string
}

// String returns the port's data key, "job:<id>:<in|out>:<name>" (Ruby's
// redis_key and to_s).
func (p *Port) String() string { return sidejobwire.PortKey(p.job.id, p.typ.String(), p.name) }

func (p *Port) setKey() string      { return p.job.key(p.typ.String() + "ports") }
func (p *Port) defaultKey() string  { return p.job.key(p.typ.String() + "ports:default") }
func (p *Port) channelsKey() string { return p.job.key(p.typ.String() + "ports:channels") }

// Input returns the input port name of the job. It fails when the job or
// the port does not exist; when the job has a "*" inport, a missing port is
// created on the spot with the default of "*" (its channels are not
// copied).
func (j *Job) Input(ctx context.Context, name string) (*Port, error) {
	return j.port(ctx, inPort, name)
}

// Output returns the output port name of the job (see Input).
func (j *Job) Output(ctx context.Context, name string) (*Port, error) {
	return j.port(ctx, outPort, name)
}

func (j *Job) port(ctx context.Context, typ portType, name string) (*Port, error) {
	if !portNameRE.MatchString(name) {
		return nil, fmt.Errorf("sidejob: invalid port name %q", name)
	}
	p := &Port{job: j, typ: typ, name: name}
	replies, err := j.c.pipeline(ctx,
		command("SISMEMBER", sidejobwire.KeyJobs, j.id),
		command("SISMEMBER", p.setKey(), name),
		command("SISMEMBER", p.setKey(), "*"),
		command("HGET", p.defaultKey(), "*"))
	if err != nil {
		return nil, fmt.Errorf("sidejob: job %d %sport %s: %w", j.id, typ, name, err)
	}
	if ok, _ := redis.Bool(replies[0], nil); !ok {
		return nil, &jobNotFoundError{ID: j.id}
	}
	if ok, _ := redis.Bool(replies[1], nil); ok {
		return p, nil
	}
	if ok, _ := redis.Bool(replies[2], nil); !ok {
		return nil, fmt.Errorf("%w: job %d has no %sport %s", errNoPort, j.id, typ, name)
	}
	cmds := []cmd{command("SADD", p.setKey(), name)}
	if def, err := redis.Bytes(replies[3], nil); err == nil {
		cmds = append(cmds, command("HSET", p.defaultKey(), name, def))
	}
	if _, err := j.c.multi(ctx, cmds...); err != nil {
		return nil, fmt.Errorf("sidejob: job %d create %sport %s: %w", j.id, typ, name, err)
	}
	return p, nil
}

// ports returns the job's ports of one type, sorted by name ("*" is left
// out).
func (j *Job) ports(ctx context.Context, typ portType) ([]*Port, error) {
	if err := j.checkExists(ctx); err != nil {
		return nil, err
	}
	names, err := redis.Strings(j.c.do(ctx, "SMEMBERS", j.key(typ.String()+"ports")))
	if err != nil {
		return nil, fmt.Errorf("sidejob: job %d %sports: %w", j.id, typ, err)
	}
	slices.Sort(names)
	out := make([]*Port, 0, len(names))
	for _, n := range names {
		if n != "*" {
			out = append(out, &Port{job: j, typ: typ, name: n})
		}
	}
	return out, nil
}

// size returns the number of values waiting on the port (LLEN; a default is
// not counted).
func (p *Port) size(ctx context.Context) (int64, error) {
	n, err := redis.Int64(p.job.c.do(ctx, "LLEN", p.String()))
	if err != nil {
		return 0, fmt.Errorf("sidejob: %s size: %w", p, err)
	}
	return n, nil
}

// defaultData returns the port's default, or nil when it has none. A null
// or false default is a non-nil *Data.
func (p *Port) defaultData(ctx context.Context) (*Data, error) {
	raw, err := redis.Bytes(p.job.c.do(ctx, "HGET", p.defaultKey(), p.name))
	if errors.Is(err, redis.ErrNil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sidejob: %s default: %w", p, err)
	}
	return decodeData(raw)
}

// SetDefault sets the port's default, the value a read returns while the
// port has no data, to v (converted as Write converts it; nil is JSON
// null), encoded with the log context and group options of ctx. A nil
// *Data (what Read returns when there is neither data nor a default; the
// gem's Port::None) removes the default.
func (p *Port) SetDefault(ctx context.Context, v any) error {
	if d, isData := v.(*Data); isData && d == nil {
		return p.clearDefault(ctx)
	}
	val, err := toValue(v)
	if err != nil {
		return fmt.Errorf("sidejob: %s default: %w", p, err)
	}
	if _, err := p.job.c.do(ctx, "HSET", p.defaultKey(), p.name, encodeData(ctx, val)); err != nil {
		return fmt.Errorf("sidejob: %s default: %w", p, err)
	}
	return nil
}

// clearDefault removes the port's default.
func (p *Port) clearDefault(ctx context.Context) error {
	if _, err := p.job.c.do(ctx, "HDEL", p.defaultKey(), p.name); err != nil {
		return fmt.Errorf("sidejob: %s clear default: %w", p, err)
	}
	return nil
}

// channels returns the port's channels ([] when none).
func (p *Port) channels(ctx context.Context) ([]string, error) {
	raw, err := redis.String(p.job.c.do(ctx, "HGET", p.channelsKey(), p.name))
	if errors.Is(err, redis.ErrNil) {
		return []string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sidejob: %s channels: %w", p, err)
	}
	chans, err := sidejobwire.DecodeChannels(raw)
	if err != nil {
		return nil, fmt.Errorf("sidejob: %s channels: %w", p, err)
	}
	return chans, nil
}

func channelsJSON(chans []string) []byte {
	vals := make([]rubyjson.Value, len(chans))
	for i, ch := range chans {
		vals[i] = rubyjson.StringValue(ch)
	}
	return rubyjson.ArrayValue(vals...).Encode()
}

// Write writes v (converted with rubyjson.FromGo; a *Data writes its value)
// to the port (Port#write):
//   - the envelope (encodeData) is pushed to the port's list, or, inside a
//     group with SetDefault, becomes the port's default;
//   - unless the group has Notify false: writing to an inport runs its job,
//     writing to an outport runs the job's parent;
//   - the write is logged unless the group has Log false;
//   - for an outport, v is published to each of its channels.
func (p *Port) Write(ctx context.Context, v any) error {
	val, err := toValue(v)
	if err != nil {
		return fmt.Errorf("sidejob: write to %s: %w", p, err)
	}
	g := groupFrom(ctx)
	enc := encodeData(ctx, val)
	c := p.job.c
	if g.option("set_default", false) {
		_, err = c.do(ctx, "HSET", p.defaultKey(), p.name, enc)
	} else {
		_, err = c.do(ctx, "RPUSH", p.String(), enc)
	}
	if err != nil {
		return fmt.Errorf("sidejob: write to %s: %w", p, err)
	}
	if g.option("notify", true) {
		if p.typ == inPort {
			_, err = p.job.Run(ctx, nil)
		} else {
			_, err = p.job.Run(ctx, &RunOpts{Parent: true})
		}
		if err != nil {
			return fmt.Errorf("sidejob: write to %s: %w", p, err)
		}
	}
	if err := c.recordPortIO(ctx, true, p, val); err != nil {
		return err
	}
	if p.typ == outPort {
		chans, err := p.channels(ctx)
		if err != nil {
			return err
		}
		for _, ch := range chans {
			if err := c.Publish(ctx, ch, val); err != nil {
				return err
			}
		}
	}
	return nil
}

// Read takes the oldest value from the port. When the port is empty it
// returns its default (which is not consumed), and nil (Ruby's None) when
// there is no default either. The read is logged unless the group has Log
// false or the value was written with logging off.
func (p *Port) Read(ctx context.Context) (*Data, error) {
	replies, err := p.job.c.multi(ctx, command("LPOP", p.String()), command("HGET", p.defaultKey(), p.name))
	if err != nil {
		return nil, fmt.Errorf("sidejob: read %s: %w", p, err)
	}
	raw, _ := redis.Bytes(replies[0], nil)
	if raw == nil {
		raw, _ = redis.Bytes(replies[1], nil)
	}
	if raw == nil {
		return nil, nil
	}
	d, err := decodeData(raw)
	if err != nil {
		return nil, err
	}
	if d.logged() {
		if err := p.job.c.recordPortIO(ctx, false, p, d.Value); err != nil {
			return d, err
		}
	}
	return d, nil
}

// Each reads values while the port has data and calls fn with each
// (Enumerable#each: the default is never yielded).
func (p *Port) Each(ctx context.Context, fn func(*Data) error) error {
	for {
		n, err := p.size(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		d, err := p.Read(ctx)
		if err != nil {
			return err
		}
		if d == nil {
			return nil
		}
		if err := fn(d); err != nil {
			return err
		}
	}
}
