package sidejob

import (
	"context"
	"fmt"

	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// Data is one value read from a port (or a port's default) with the context
// and options of its envelope (Ruby's delegator with sidejob_context and
// sidejob_options). A nil *Data is the gem's Port::None: there was no data
// and no default.
type Data struct {
	// Value is the JSON value.
	Value rubyjson.Value
	// Context is the SideJob context that was active when the value was
	// written ({} when the envelope has none).
	Context *rubyjson.Map
	// Options are the port-group options active when the value was written
	// ({} when the envelope has none).
	Options *rubyjson.Map
}

// Interface returns the value as plain Go data (see rubyjson.Value.Interface).
func (d *Data) Interface() any {
	if d == nil {
		return nil
	}
	return d.Value.Interface()
}

// logged reports whether a read of d is logged: not when its envelope was
// written with logging off.
func (d *Data) logged() bool {
	if v, ok := d.Options.Get("log"); ok {
		if b, isBool := v.Bool(); isBool && !b {
			return false
		}
	}
	return true
}

// EncodeData returns the envelope of v as Port.encode_data writes it:
// {"data": v}, plus "context" when a log context is active on ctx (even an
// empty one), plus "options" when ctx is inside a port group.
func EncodeData(ctx context.Context, v rubyjson.Value) []byte {
	m := rubyjson.NewMap()
	m.Set("data", v)
	if cx := ContextFields(ctx); cx != nil {
		m.Set("context", rubyjson.ObjectValue(cx))
	}
	if g := groupFrom(ctx); g != nil {
		m.Set("options", rubyjson.ObjectValue(g.opts.Clone()))
	}
	return m.Encode()
}

// DecodeData reads an envelope (Port.decode_data). The value is the "data"
// field (null when missing); context and options default to {}. For data
// written by SideJob before 4.1 (plain JSON, not an object with "data"), the
// whole document is the value.
func DecodeData(raw []byte) (*Data, error) {
	v, err := rubyjson.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("sidejob: decode port data: %w", err)
	}
	d := &Data{Context: rubyjson.NewMap(), Options: rubyjson.NewMap()}
	obj, ok := v.Map()
	if !ok || !obj.Has("data") {
		d.Value = v
		return d, nil
	}
	d.Value, _ = obj.Get("data")
	if cx, ok := obj.Get("context"); ok {
		if m, isObj := cx.Map(); isObj {
			d.Context = m
		}
	}
	if op, ok := obj.Get("options"); ok {
		if m, isObj := op.Map(); isObj {
			d.Options = m
		}
	}
	return d, nil
}

// toValue converts a Go value for a port or state write.
func toValue(x any) (rubyjson.Value, error) {
	if d, ok := x.(*Data); ok {
		if d == nil {
			return rubyjson.NullValue(), nil
		}
		return d.Value, nil
	}
	return rubyjson.FromGo(x)
}
