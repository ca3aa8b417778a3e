package sidejob

import (
	"context"

	"github.com/gojob/gojob/internal/sidejobwire"
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

// encodeData returns the envelope of v as Port.encode_data writes it:
// {"data": v}, plus "context" when a log context is active on ctx (even an
// empty one), plus "options" when ctx is inside a port group.
func encodeData(ctx context.Context, v rubyjson.Value) []byte {
	m := rubyjson.NewMap()
	m.Set("data", v)
	if cx := contextFields(ctx); cx != nil {
		m.Set("context", rubyjson.ObjectValue(cx))
	}
	if g := groupFrom(ctx); g != nil {
		m.Set("options", rubyjson.ObjectValue(g.opts.Clone()))
	}
	return m.Encode()
}

// decodeData reads an envelope (see sidejobwire.DecodeEnvelope).
func decodeData(raw []byte) (*Data, error) {
	v, cx, opts, err := sidejobwire.DecodeEnvelope(raw)
	if err != nil {
		return nil, err
	}
	return &Data{Value: v, Context: cx, Options: opts}, nil
}

// toValue converts a Go value for a port or state write.
func toValue(x any) (rubyjson.Value, error) {
	if d, ok := x.(*Data); ok {
		if d == nil {
			return rubyjson.Value{}, nil
		}
		return d.Value, nil
	}
	return rubyjson.FromGo(x)
}
