package typed

import (
	"fmt"
	"math/big"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

var mapPtrType = reflect.TypeFor[*rubyjson.Map]()

// encodeArgs returns the job arguments for args: a Positional struct's
// fields in order, anything else as the single argument args[0]. For an
// interface T, the dynamic type decides.
func encodeArgs[T any](args T) ([]rubyjson.Value, error) {
	rv := reflect.ValueOf(&args).Elem()
	if rv.Kind() == reflect.Interface && !rv.IsNil() {
		rv = rv.Elem()
	}
	if isPositional(rv.Type()) {
		si := infoOf(rv.Type())
		out := make([]rubyjson.Value, 0, len(si.fields))
		for _, f := range si.fields[:positionalLen(si, rv)] {
			v, err := encode(rv.FieldByIndex(f.index))
			if err != nil {
				return nil, fmt.Errorf("typed: %s.%s: %w", rv.Type().Name(), f.name, err)
			}
			out = append(out, v)
		}
		return out, nil
	}
	v, err := encode(rv)
	if err != nil {
		return nil, fmt.Errorf("typed: %s: %w", rv.Type(), err)
	}
	return []rubyjson.Value{v}, nil
}

// NewJob builds the job Ruby's Class.perform_async(*args) hands to the
// client, with its key order ("args", then "class"): a Positional
// struct's fields are the arguments in order, anything else the single
// argument args[0] (for an interface T, the dynamic type decides).
// Client.Push adds the rest (retry, queue, jid, created_at) as Ruby does;
// set the queue first with job.SetQueue for Class.set(queue:), and
// schedule with PushOpts for perform_in and perform_at.
func NewJob[T any](class string, args T) (*wire.Job, error) {
	vals, err := encodeArgs(args)
	if err != nil {
		return nil, err
	}
	m := rubyjson.NewMap()
	m.Set("args", rubyjson.ArrayValue(vals...))
	m.Set("class", rubyjson.StringValue(class))
	return wire.JobFromMap(m), nil
}

func encode(rv reflect.Value) (rubyjson.Value, error) {
	t := rv.Type()
	switch t {
	case valueType:
		return rv.Interface().(rubyjson.Value), nil
	case mapPtrType:
		if rv.IsNil() {
			return rubyjson.Value{}, nil
		}
		return rubyjson.ObjectValue(rv.Interface().(*rubyjson.Map)), nil
	case timeType:
		tm := rv.Interface().(time.Time)
		// Ruby's Time#to_f.
		return rubyjson.FloatValue(float64(tm.Unix()) + float64(tm.Nanosecond())/1e9), nil
	case durationType:
		d := time.Duration(rv.Int())
		if d%time.Second == 0 {
			return rubyjson.IntValue(int64(d / time.Second)), nil
		}
		return rubyjson.FloatValue(d.Seconds()), nil
	case bigIntType:
		if rv.IsNil() {
			return rubyjson.Value{}, nil
		}
		return rubyjson.FromGo(rv.Interface().(*big.Int))
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return rubyjson.Value{}, nil
		}
		return encode(rv.Elem())
	case reflect.Bool:
		return rubyjson.BoolValue(rv.Bool()), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rubyjson.IntValue(rv.Int()), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return rubyjson.FromGo(rv.Uint())
	case reflect.Float32, reflect.Float64:
		return rubyjson.FloatValue(rv.Float()), nil
	case reflect.String:
		return rubyjson.StringValue(rv.String()), nil
	case reflect.Slice, reflect.Array:
		out := make([]rubyjson.Value, rv.Len())
		for i := range out {
			v, err := encode(rv.Index(i))
			if err != nil {
				return rubyjson.Value{}, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = v
		}
		return rubyjson.ArrayValue(out...), nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			break
		}
		if rv.IsNil() {
			return rubyjson.Value{}, nil
		}
		keys := rv.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		m := rubyjson.NewMap()
		for _, k := range keys {
			v, err := encode(rv.MapIndex(k))
			if err != nil {
				return rubyjson.Value{}, fmt.Errorf("[%q]: %w", k.String(), err)
			}
			m.Set(k.String(), v)
		}
		return rubyjson.ObjectValue(m), nil
	case reflect.Struct:
		si := infoOf(t)
		if si.positional {
			out := make([]rubyjson.Value, 0, len(si.fields))
			for _, f := range si.fields[:positionalLen(si, rv)] {
				v, err := encode(rv.FieldByIndex(f.index))
				if err != nil {
					return rubyjson.Value{}, fmt.Errorf("%s: %w", f.name, err)
				}
				out = append(out, v)
			}
			return rubyjson.ArrayValue(out...), nil
		}
		m := rubyjson.NewMap()
		for _, f := range si.fields {
			fv := rv.FieldByIndex(f.index)
			if f.omitEmpty && fv.IsZero() {
				continue
			}
			v, err := encode(fv)
			if err != nil {
				return rubyjson.Value{}, fmt.Errorf("%s: %w", f.name, err)
			}
			m.Set(f.key, v)
		}
		return rubyjson.ObjectValue(m), nil
	}
	return rubyjson.Value{}, fmt.Errorf("cannot encode a %s as a Sidekiq argument", t)
}

// positionalLen is the number of positional arguments written: trailing
// optional fields left at their zero value are omitted, as a Ruby caller
// omits an argument that has a default.
func positionalLen(si *structInfo, rv reflect.Value) int {
	n := len(si.fields)
	for n > 0 && si.fields[n-1].optional && rv.FieldByIndex(si.fields[n-1].index).IsZero() {
		n--
	}
	return n
}
