package sidejob

import (
	"context"
	"fmt"

	"github.com/gomodule/redigo/redis"
)

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
			chans, err := dst.Channels(ctx)
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
