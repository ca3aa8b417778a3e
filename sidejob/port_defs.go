package sidejob

import (
	"context"
	"fmt"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// portDef declares a port and its options, as the gem's port hashes
// ({name => {default:, channels:}}) do. The name "*" declares a dynamic
// port: ports that do not exist are created on first use and get its
// default.
type portDef struct {
	// Name is the port name ([a-zA-Z0-9_]+, or "*").
	Name string
	// HasDefault tells whether the port has a default; Default is its value
	// then (nil is JSON null). Without it the port has no default.
	HasDefault bool
	// Default is the default value (see HasDefault), converted with
	// rubyjson.FromGo.
	Default any
	// Channels are the port's channels.
	Channels []string
}

// portDefsFromJSON reads a ports object of a worker config or the web API:
// {"name": {"default": v, "channels": [..]}, …}. Keys stay in order.
func portDefsFromJSON(v rubyjson.Value) ([]portDef, error) {
	if v.Kind() == rubyjson.Null {
		return nil, nil
	}
	m, ok := v.Map()
	if !ok {
		return nil, fmt.Errorf("sidejob: ports must be an object, got %s", v.Kind())
	}
	out := make([]portDef, 0, m.Len())
	for i := 0; i < m.Len(); i++ {
		name, opts := m.At(i)
		d := portDef{Name: name}
		if om, isObj := opts.Map(); isObj {
			if def, ok := om.Get("default"); ok {
				d.HasDefault, d.Default = true, def
			}
			if ch, ok := om.Get("channels"); ok {
				if arr, isArr := ch.Array(); isArr {
					for _, e := range arr {
						if s, isStr := e.Str(); isStr {
							d.Channels = append(d.Channels, s)
						}
					}
				}
			}
		}
		out = append(out, d)
	}
	return out, nil
}

// parsePortDefs parses a ports object such as
// {"in":{},"extra":{"default":[1,2],"channels":["/test/chan"]}}; "" is
// no ports.
func parsePortDefs(js string) ([]portDef, error) {
	if js == "" {
		return nil, nil
	}
	v, err := rubyjson.Parse([]byte(js))
	if err != nil {
		return nil, fmt.Errorf("sidejob: ports: %w", err)
	}
	return portDefsFromJSON(v)
}

// mergePortDefs is Hash#merge: base order, given entries replace base
// entries of the same name in place, new names are appended.
func mergePortDefs(base, given []portDef) []portDef {
	out := append([]portDef(nil), base...)
	for _, g := range given {
		replaced := false
		for i := range out {
			if out[i].Name == g.Name {
				out[i] = g
				replaced = true
				break
			}
		}
		if !replaced {
			out = append(out, g)
		}
	}
	return out
}

// setInports replaces the job's input ports (Ruby's inports=): the worker
// config's inports merged with defs (defs win). See setPorts.
func (j *Job) setInports(ctx context.Context, defs []portDef) error {
	return j.setPorts(ctx, inPort, defs)
}

// setOutports replaces the job's output ports (Ruby's outports=).
func (j *Job) setOutports(ctx context.Context, defs []portDef) error {
	return j.setPorts(ctx, outPort, defs)
}

// setPorts writes the port set in one MULTI (docs/sidejob.md#setting-ports): the data of ports
// that are not kept is deleted, the name set, defaults and channels are
// rewritten, and the job is added to channel:<ch> for every channel (in and
// out). Defaults are encoded with the context and group options of ctx.
func (j *Job) setPorts(ctx context.Context, typ portType, defs []portDef) error {
	if err := j.checkExists(ctx); err != nil {
		return err
	}
	cfg, err := j.workerConfig(ctx)
	if err != nil {
		return err
	}
	all, values, err := resolvePorts(cfg, typ, defs)
	if err != nil {
		return fmt.Errorf("sidejob: job %d %sports: %w", j.id, typ, err)
	}
	setKey := j.key(typ.String() + "ports")
	current, err := redis.Strings(j.c.do(ctx, "SMEMBERS", setKey))
	if err != nil {
		return fmt.Errorf("sidejob: job %d %sports: %w", j.id, typ, err)
	}
	keep := map[string]bool{}
	names := []any{setKey}
	defaults := []any{j.key(typ.String() + "ports:default")}
	channels := []any{j.key(typ.String() + "ports:channels")}
	var cmds, subs []cmd
	for _, d := range all {
		keep[d.Name] = true
		names = append(names, d.Name)
		if d.HasDefault {
			defaults = append(defaults, d.Name, encodeData(ctx, values[d.Name]))
		}
		if len(d.Channels) > 0 {
			channels = append(channels, d.Name, channelsJSON(d.Channels))
			for _, ch := range d.Channels {
				subs = append(subs, command("SADD", sidejobwire.ChannelKey(ch), j.id))
			}
		}
	}
	for _, name := range current {
		if !keep[name] {
			cmds = append(cmds, command("DEL", j.key(typ.String()+":"+name)))
		}
	}
	cmds = append(cmds, command("DEL", setKey))
	if len(names) > 1 {
		cmds = append(cmds, command("SADD", names...))
	}
	cmds = append(cmds, command("DEL", defaults[0]))
	if len(defaults) > 1 {
		cmds = append(cmds, command("HSET", defaults...))
	}
	cmds = append(cmds, command("DEL", channels[0]))
	if len(channels) > 1 {
		cmds = append(cmds, command("HSET", channels...))
	}
	cmds = append(cmds, subs...)
	if _, err := j.c.multi(ctx, cmds...); err != nil {
		return fmt.Errorf("sidejob: job %d set %sports: %w", j.id, typ, err)
	}
	return nil
}

// resolvePorts returns the port set that setPorts writes: the ports of typ
// in the worker config cfg (nil: none) merged with defs, every name checked
// and every default converted (values, by port name). It writes nothing,
// so Client.Queue can validate the ports before it allocates a job id.
func resolvePorts(cfg *rubyjson.Map, typ portType, defs []portDef) ([]portDef, map[string]rubyjson.Value, error) {
	var base []portDef
	if cfg != nil {
		pv, _ := cfg.Get(typ.String() + "ports")
		var err error
		if base, err = portDefsFromJSON(pv); err != nil {
			return nil, nil, fmt.Errorf("worker config: %w", err)
		}
	}
	all := mergePortDefs(base, defs)
	values := map[string]rubyjson.Value{}
	for _, d := range all {
		if d.Name != "*" && !portNameRE.MatchString(d.Name) {
			return nil, nil, fmt.Errorf("invalid port name %q", d.Name)
		}
		if d.HasDefault {
			v, err := toValue(d.Default)
			if err != nil {
				return nil, nil, fmt.Errorf("port %s default: %w", d.Name, err)
			}
			values[d.Name] = v
		}
	}
	return all, values, nil
}
