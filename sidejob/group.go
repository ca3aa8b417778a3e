package sidejob

import (
	"context"
	"sync"

	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// groupOptions are the options of a port group (Ruby's Port.group). A nil
// field inherits the enclosing group's option.
type groupOptions struct {
	// Log false stops the logging of reads and writes (and marks written
	// envelopes so that their readers do not log them either).
	Log *bool
	// Notify false stops port writes from running jobs.
	Notify *bool
	// SetDefault true makes writes set the port's default instead of
	// pushing data.
	SetDefault *bool
}

// opt returns a pointer to b, for groupOptions.
func opt(b bool) *bool { return &b }

// group is the port-group state carried by a ctx.
type group struct {
	opts *rubyjson.Map // in Ruby's merge order; written into envelopes
	col  *collector    // shared by nested groups; flushed by the outermost
}

func groupFrom(ctx context.Context) *group {
	g, _ := ctx.Value(groupKey).(*group)
	return g
}

// option reads a boolean group option; def when unset.
func (g *group) option(name string, def bool) bool {
	if g == nil {
		return def
	}
	v, ok := g.opts.Get(name)
	if !ok {
		return def
	}
	b, isBool := v.Bool()
	if !isBool {
		return v.Truthy()
	}
	return b
}

// collector gathers the reads and writes of a group, per port in first-touch
// order, with deep-copied data.
type collector struct {
	mu     sync.Mutex
	reads  []*logItem
	writes []*logItem
}

type logItem struct {
	job  int64
	typ  portType
	name string
	data []rubyjson.Value
}

func (col *collector) add(write bool, p *Port, v rubyjson.Value) {
	col.mu.Lock()
	defer col.mu.Unlock()
	list := &col.reads
	if write {
		list = &col.writes
	}
	for _, it := range *list {
		if it.job == p.job.id && it.typ == p.typ && it.name == p.name {
			it.data = append(it.data, v.Clone())
			return
		}
	}
	*list = append(*list, &logItem{job: p.job.id, typ: p.typ, name: p.name, data: []rubyjson.Value{v.Clone()}})
}

// entry returns the {"read":[…],"write":[…]} log entry, or nil when nothing
// was collected.
func (col *collector) entry() *rubyjson.Map {
	col.mu.Lock()
	defer col.mu.Unlock()
	if len(col.reads) == 0 && len(col.writes) == 0 {
		return nil
	}
	items := func(list []*logItem) rubyjson.Value {
		out := make([]rubyjson.Value, len(list))
		for i, it := range list {
			m := rubyjson.NewMap()
			m.Set("job", rubyjson.IntValue(it.job))
			m.Set("data", rubyjson.ArrayValue(it.data...))
			m.Set(it.typ.String()+"port", rubyjson.StringValue(it.name))
			out[i] = rubyjson.ObjectValue(m)
		}
		return rubyjson.ArrayValue(out...)
	}
	m := rubyjson.NewMap()
	m.Set("read", items(col.reads))
	m.Set("write", items(col.writes))
	return m
}

// inGroup runs fn inside a port group (Ruby's Port.group): groups nest, each
// inheriting the enclosing options and overriding the ones it sets; the reads
// and writes of ports made with the ctx given to fn are collected, and when
// the outermost group ends, one log entry {"read":[…],"write":[…]} is
// written if anything was collected. Envelopes written inside a group carry
// its options ("options":{…}). The entry is written even when fn fails; its
// error, if any, is returned first.
func (c *Client) inGroup(ctx context.Context, opts *groupOptions, fn func(ctx context.Context) error) error {
	parent := groupFrom(ctx)
	g := &group{opts: rubyjson.NewMap()}
	if parent != nil {
		g.opts = parent.opts.Clone()
		g.col = parent.col
	} else {
		g.col = &collector{}
	}
	if opts != nil {
		for _, o := range []struct {
			name string
			v    *bool
		}{{"log", opts.Log}, {"notify", opts.Notify}, {"set_default", opts.SetDefault}} {
			if o.v != nil {
				g.opts.Set(o.name, rubyjson.BoolValue(*o.v))
			}
		}
	}
	err := fn(context.WithValue(ctx, groupKey, g))
	if parent != nil {
		return err
	}
	if entry := g.col.entry(); entry != nil {
		if lerr := c.Log(ctx, entry); lerr != nil && err == nil {
			err = lerr
		}
	}
	return err
}

// recordPortIO logs a port read or write: into the enclosing group, or as
// its own log entry outside any group.
func (c *Client) recordPortIO(ctx context.Context, write bool, p *Port, v rubyjson.Value) error {
	g := groupFrom(ctx)
	if !g.option("log", true) {
		return nil
	}
	if g != nil {
		g.col.add(write, p, v)
		return nil
	}
	col := &collector{}
	col.add(write, p, v)
	return c.Log(ctx, col.entry())
}
