package typed

import (
	"fmt"
	"reflect"

	"github.com/gojob/gojob/sidekiq/activejob"
)

// ActiveJobArgs returns args as the arguments of activejob.Params: a
// Positional struct's fields in order, anything else as one argument. A
// struct bound to a hash becomes a Ruby Hash with Symbol keys, as
// perform_later(user, {count: 3}) writes it; fields of the activejob
// types (GlobalID, Symbol, Time, *Hash...) are written as those types.
// activejob.Push then pushes the job as Rails' perform_later does.
func ActiveJobArgs[T any](args T) ([]any, error) {
	rv := reflect.ValueOf(&args).Elem()
	if rv.Kind() == reflect.Interface && !rv.IsNil() {
		rv = rv.Elem()
	}
	if isPositional(rv.Type()) {
		si := infoOf(rv.Type())
		out := make([]any, 0, len(si.fields))
		for _, f := range si.fields[:positionalLen(si, rv)] {
			x, err := ajValue(rv.FieldByIndex(f.index))
			if err != nil {
				return nil, fmt.Errorf("typed: %s.%s: %w", rv.Type().Name(), f.name, err)
			}
			out = append(out, x)
		}
		return out, nil
	}
	x, err := ajValue(rv)
	if err != nil {
		return nil, fmt.Errorf("typed: %s: %w", rv.Type(), err)
	}
	return []any{x}, nil
}

// ajValue converts a Go value for activejob.Params.Args: structs
// (but the activejob types and time.Time) become symbol-keyed hashes.
func ajValue(rv reflect.Value) (any, error) {
	t := rv.Type()
	if t.PkgPath() == reflect.TypeFor[activejob.Time]().PkgPath() || t == timeType {
		return rv.Interface(), nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		if rv.IsNil() {
			return nil, nil
		}
		if t.Elem().Kind() == reflect.Struct && t.Elem().PkgPath() != reflect.TypeFor[activejob.Time]().PkgPath() {
			return ajValue(rv.Elem())
		}
	case reflect.Struct:
		si := infoOf(t)
		if si.positional {
			out := make([]any, 0, len(si.fields))
			for _, f := range si.fields[:positionalLen(si, rv)] {
				x, err := ajValue(rv.FieldByIndex(f.index))
				if err != nil {
					return nil, err
				}
				out = append(out, x)
			}
			return out, nil
		}
		h := &activejob.Hash{Kind: activejob.HashPlain}
		for _, f := range si.fields {
			fv := rv.FieldByIndex(f.index)
			if f.omitEmpty && fv.IsZero() {
				continue
			}
			x, err := ajValue(fv)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f.name, err)
			}
			h.Entries = append(h.Entries, activejob.HashEntry{Key: f.key, Symbol: true, Value: x})
		}
		return h, nil
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Struct || t.Elem().Kind() == reflect.Pointer {
			out := make([]any, rv.Len())
			for i := range out {
				x, err := ajValue(rv.Index(i))
				if err != nil {
					return nil, err
				}
				out[i] = x
			}
			return out, nil
		}
	}
	return rv.Interface(), nil
}
