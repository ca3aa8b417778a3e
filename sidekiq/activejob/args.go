package activejob

import (
	"fmt"
	"maps"
	"math/big"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// ActiveJob argument types.
//
// ActiveJob (rails activejob/lib/active_job/arguments.rb) writes Ruby values
// that JSON cannot hold as objects carrying "_aj_*" markers. Decode turns
// them into the types of types.go (and Hash below), which a handler can
// type-switch on, and New (Params.Args) turns them back into exactly the
// JSON Ruby writes.
//
// JSON scalars decode to nil, bool, int64 (*big.Int when it does not fit),
// float64 and string; arrays to []any; objects to *Hash, GlobalID or one of
// the serialized types.

// Marker keys (ActiveJob::Arguments constants).
const (
	ajGlobalIDKey    = "_aj_globalid"
	ajSymbolKeysKey  = "_aj_symbol_keys"
	ajRuby2KwKey     = "_aj_ruby2_keywords"
	ajIndifferentKey = "_aj_hash_with_indifferent_access"
	ajSerializerKey  = "_aj_serialized"
)

// Serializer class names (ActiveJob::Serializers).
const (
	ajSymbolSerializer       = "ActiveJob::Serializers::SymbolSerializer"
	ajTimeSerializer         = "ActiveJob::Serializers::TimeSerializer"
	ajDateTimeSerializer     = "ActiveJob::Serializers::DateTimeSerializer"
	ajTimeWithZoneSerializer = "ActiveJob::Serializers::TimeWithZoneSerializer"
	ajDateSerializer         = "ActiveJob::Serializers::DateSerializer"
	ajDurationSerializer     = "ActiveJob::Serializers::DurationSerializer"
	ajModuleSerializer       = "ActiveJob::Serializers::ModuleSerializer"
	ajBigDecimalSerializer   = "ActiveJob::Serializers::BigDecimalSerializer"
	ajRangeSerializer        = "ActiveJob::Serializers::RangeSerializer"
)

var ajReservedKeys = []string{ajGlobalIDKey, ajSymbolKeysKey, ajRuby2KwKey, ajSerializerKey, ajIndifferentKey}

// HashKind is the Ruby class of a hash argument, given by its marker key.
type HashKind uint8

// The hash kinds.
const (
	// HashPlain is a Ruby Hash: "_aj_symbol_keys" lists its Symbol keys
	// (ActiveJob 5+ writes the marker on every plain Hash, even when empty).
	HashPlain HashKind = iota
	// HashIndifferent is an ActiveSupport::HashWithIndifferentAccess:
	// "_aj_hash_with_indifferent_access": true; its keys are all strings.
	HashIndifferent
	// HashKeywords is a keyword-argument hash (ruby2_keywords):
	// "_aj_ruby2_keywords" lists its Symbol keys (Rails 6.1+).
	HashKeywords
	// HashUnmarked is a JSON object with no marker: Ruby reads it as a Hash
	// with string keys. Rails does not write it; it is kept so such input
	// re-encodes unchanged.
	HashUnmarked
)

// Hash is a Ruby Hash argument, in order, with the Symbol-ness of each key.
type Hash struct {
	Kind    HashKind
	Entries []HashEntry
}

// HashEntry is one key and value of an Hash.
type HashEntry struct {
	// Key is the key's name.
	Key string
	// Symbol is true for a Symbol key (:key), false for a String key.
	Symbol bool
	// Value is the decoded value (or, when building, any value
	// Params.Args accepts).
	Value any
}

// Keywords returns keyword arguments from m, keys sorted: perform(x, a: 1)
// is Params.Args []any{x, Keywords(map[string]any{"a": 1})}.
func Keywords(m map[string]any) *Hash { return ajHashFrom(HashKeywords, m, true) }

func ajHashFrom(kind HashKind, m map[string]any, sym bool) *Hash {
	h := &Hash{Kind: kind}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		h.Entries = append(h.Entries, HashEntry{Key: k, Symbol: sym, Value: m[k]})
	}
	return h
}

// Get returns the value of key (String or Symbol) and whether it is present.
func (h *Hash) Get(key string) (any, bool) {
	for _, e := range h.Entries {
		if e.Key == key {
			return e.Value, true
		}
	}
	return nil, false
}

// rubyJSON implements argValue: the entries, then the kind's marker,
// as ActiveJob::Arguments#serialize_argument writes them. A reserved _aj_ key
// is an error, as in Ruby.
func (h Hash) rubyJSON() (rubyjson.Value, error) {
	m := rubyjson.NewMap()
	var syms []rubyjson.Value
	for _, e := range h.Entries {
		if slices.Contains(ajReservedKeys, e.Key) {
			return rubyjson.Value{}, fmt.Errorf("can't serialize a Hash with reserved key %q", e.Key)
		}
		v, err := serializeArgument(e.Value)
		if err != nil {
			return rubyjson.Value{}, fmt.Errorf("key %q: %w", e.Key, err)
		}
		m.Set(e.Key, v)
		if e.Symbol {
			syms = append(syms, rubyjson.StringValue(e.Key))
		}
	}
	switch h.Kind {
	case HashPlain:
		m.Set(ajSymbolKeysKey, rubyjson.ArrayValue(syms...))
	case HashKeywords:
		m.Set(ajRuby2KwKey, rubyjson.ArrayValue(syms...))
	case HashIndifferent:
		m.Set(ajIndifferentKey, rubyjson.BoolValue(true))
	}
	return rubyjson.ObjectValue(m), nil
}

func ajSerializedValue(serializer, key string, v rubyjson.Value) rubyjson.Value {
	m := rubyjson.NewMap()
	m.Set(ajSerializerKey, rubyjson.StringValue(serializer))
	m.Set(key, v)
	return rubyjson.ObjectValue(m)
}

// serializeArguments converts Go values to ActiveJob's serialized form, as
// ActiveJob::Arguments.serialize does (the rules are on Params.Args).
func serializeArguments(args ...any) ([]rubyjson.Value, error) {
	out := make([]rubyjson.Value, len(args))
	for i, a := range args {
		v, err := serializeArgument(a)
		if err != nil {
			return nil, fmt.Errorf("sidekiq: activejob argument %d: %w", i, err)
		}
		out[i] = v
	}
	return out, nil
}

// argValue is implemented by the argument types of this package: each
// writes its ActiveJob JSON form.
type argValue interface {
	rubyJSON() (rubyjson.Value, error)
}

// serializeArgument converts one Go value (see serializeArguments).
func serializeArgument(x any) (rubyjson.Value, error) {
	switch t := x.(type) {
	case nil:
		return rubyjson.Value{}, nil
	case rubyjson.Value:
		return t, nil
	case *rubyjson.Map:
		return rubyjson.ObjectValue(t), nil
	case time.Time:
		return Time{Time: t}.rubyJSON()
	case *time.Time:
		if t == nil {
			return rubyjson.Value{}, nil
		}
		return Time{Time: *t}.rubyJSON()
	case time.Duration:
		return newDuration(t).rubyJSON()
	case *Hash:
		if t == nil {
			return rubyjson.Value{}, nil
		}
		return t.rubyJSON()
	case argValue:
		if rv := reflect.ValueOf(t); rv.Kind() == reflect.Pointer && rv.IsNil() {
			return rubyjson.Value{}, nil
		}
		return t.rubyJSON()
	case bool, string, []byte, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64,
		float32, float64, *big.Int:
		return rubyjson.FromGo(t)
	case map[string]any:
		return ajHashFrom(HashPlain, t, false).rubyJSON()
	case []any:
		return serializeSlice(len(t), func(i int) any { return t[i] })
	}
	return serializeReflect(reflect.ValueOf(x))
}

func serializeSlice(n int, at func(int) any) (rubyjson.Value, error) {
	out := make([]rubyjson.Value, n)
	for i := range n {
		v, err := serializeArgument(at(i))
		if err != nil {
			return rubyjson.Value{}, fmt.Errorf("index %d: %w", i, err)
		}
		out[i] = v
	}
	return rubyjson.ArrayValue(out...), nil
}

var ajSymbolType = reflect.TypeFor[Symbol]()

func serializeReflect(rv reflect.Value) (rubyjson.Value, error) {
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return rubyjson.Value{}, nil
		}
		return serializeArgument(rv.Elem().Interface())
	case reflect.Bool:
		return rubyjson.BoolValue(rv.Bool()), nil
	case reflect.String:
		return rubyjson.StringValue(rv.String()), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rubyjson.IntValue(rv.Int()), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return rubyjson.FromGo(rv.Uint())
	case reflect.Float32, reflect.Float64:
		return rubyjson.FloatValue(rv.Float()), nil
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			return rubyjson.ArrayValue(), nil
		}
		return serializeSlice(rv.Len(), func(i int) any { return rv.Index(i).Interface() })
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			break
		}
		sym := rv.Type().Key() == ajSymbolType
		keys := rv.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		h := &Hash{}
		for _, k := range keys {
			h.Entries = append(h.Entries, HashEntry{Key: k.String(), Symbol: sym, Value: rv.MapIndex(k).Interface()})
		}
		return h.rubyJSON()
	}
	if !rv.IsValid() {
		return rubyjson.Value{}, nil
	}
	return rubyjson.Value{}, fmt.Errorf("unsupported argument type %s", rv.Type())
}

// deserializeArguments decodes serialized ActiveJob arguments into Go
// values, as ActiveJob::Arguments.deserialize reads them (see the AJ* types).
// An object naming a serializer gojob does not know becomes an Serialized,
// never an error; a malformed known marker (a Symbol without a string value,
// an unparsable time) is an error, as it is in Ruby.
func deserializeArguments(vals []rubyjson.Value) ([]any, error) {
	out := make([]any, len(vals))
	for i, v := range vals {
		x, err := deserializeArgument(v)
		if err != nil {
			return nil, fmt.Errorf("sidekiq: activejob argument %d: %w", i, err)
		}
		out[i] = x
	}
	return out, nil
}

// deserializeArgument decodes one serialized argument (see
// deserializeArguments).
func deserializeArgument(v rubyjson.Value) (any, error) {
	switch v.Kind() {
	case rubyjson.Array:
		arr, _ := v.Array()
		out := make([]any, len(arr))
		for i, e := range arr {
			x, err := deserializeArgument(e)
			if err != nil {
				return nil, fmt.Errorf("index %d: %w", i, err)
			}
			out[i] = x
		}
		return out, nil
	case rubyjson.Object:
		m, _ := v.Map()
		return deserializeObject(m)
	}
	return v.Interface(), nil
}

func deserializeObject(m *rubyjson.Map) (any, error) {
	if gid, ok := m.Get(ajGlobalIDKey); ok && m.Len() == 1 {
		s, ok := gid.Str()
		if !ok {
			return nil, fmt.Errorf("%s must be a string", ajGlobalIDKey)
		}
		return GlobalID(s), nil
	}
	if name, ok := m.Get(ajSerializerKey); ok {
		return deserializeSerialized(m, name)
	}
	return deserializeHash(m)
}

func deserializeHash(m *rubyjson.Map) (*Hash, error) {
	h := &Hash{Kind: HashUnmarked}
	vals := make(map[string]any, m.Len())
	for i := range m.Len() {
		k, v := m.At(i)
		x, err := deserializeArgument(v)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", k, err)
		}
		vals[k] = x
		h.Entries = append(h.Entries, HashEntry{Key: k, Value: x})
	}
	// Ruby's deserialize_hash: each marker is deleted (and tested) in turn
	// until one is truthy.
	marker := func(key string) (any, bool) {
		v, ok := vals[key]
		if !ok {
			return nil, false
		}
		h.Entries = slices.DeleteFunc(h.Entries, func(e HashEntry) bool { return e.Key == key })
		return v, v != nil && v != false
	}
	if _, ok := marker(ajIndifferentKey); ok {
		h.Kind = HashIndifferent
	} else if v, ok := marker(ajSymbolKeysKey); ok {
		h.Kind = HashPlain
		if err := h.markSymbols(ajSymbolKeysKey, v); err != nil {
			return nil, err
		}
	} else if v, ok := marker(ajRuby2KwKey); ok {
		h.Kind = HashKeywords
		if err := h.markSymbols(ajRuby2KwKey, v); err != nil {
			return nil, err
		}
	}
	if len(h.Entries) == 0 {
		h.Entries = nil
	}
	return h, nil
}

func (h *Hash) markSymbols(key string, v any) error {
	list, ok := v.([]any)
	if !ok {
		return fmt.Errorf("%s must be an array", key)
	}
	for i := range h.Entries {
		h.Entries[i].Symbol = slices.Contains(list, any(h.Entries[i].Key))
	}
	return nil
}

func deserializeSerialized(m *rubyjson.Map, nameV rubyjson.Value) (any, error) {
	name, _ := nameV.Str()
	str := func(key string) (string, error) {
		v, _ := m.Get(key)
		s, ok := v.Str()
		if !ok {
			return "", fmt.Errorf("%s: %q must be a string", name, key)
		}
		return s, nil
	}
	switch name {
	case ajSymbolSerializer:
		s, err := str("value")
		return Symbol(s), err
	case ajModuleSerializer:
		s, err := str("value")
		return Module(s), err
	case ajBigDecimalSerializer:
		s, err := str("value")
		return BigDecimal(s), err
	case ajDateSerializer:
		s, err := str("value")
		if err != nil {
			return nil, err
		}
		d, err := parseAJDate(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return d, nil
	case ajTimeSerializer, ajDateTimeSerializer, ajTimeWithZoneSerializer:
		return deserializeTime(m, name, str)
	case ajDurationSerializer:
		return deserializeDuration(m)
	case ajRangeSerializer:
		var r Range
		var err error
		b, _ := m.Get("begin")
		if r.Begin, err = deserializeArgument(b); err != nil {
			return nil, fmt.Errorf("%s begin: %w", name, err)
		}
		e, _ := m.Get("end")
		if r.End, err = deserializeArgument(e); err != nil {
			return nil, fmt.Errorf("%s end: %w", name, err)
		}
		x, _ := m.Get("exclude_end")
		r.ExcludeEnd = x.Truthy()
		return r, nil
	}
	return Serialized{Object: m}, nil
}

func deserializeTime(m *rubyjson.Map, name string, str func(string) (string, error)) (any, error) {
	s, err := str("value")
	if err != nil {
		return nil, err
	}
	t, err := parseAJTime(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	out := Time{Time: t, text: s}
	switch name {
	case ajDateTimeSerializer:
		out.Kind = TimeKindDateTime
	case ajTimeWithZoneSerializer:
		out.Kind = TimeKindTimeWithZone
		if z, ok := m.Get("time_zone"); ok {
			out.Zone, _ = z.Str()
			if loc, err := time.LoadLocation(out.Zone); err == nil && out.Zone != "" {
				out.Time = t.In(loc)
			}
		}
	}
	return out, nil
}

func deserializeDuration(m *rubyjson.Map) (any, error) {
	const name = ajDurationSerializer
	var d Duration
	d.Seconds, _ = m.Get("value")
	pv, _ := m.Get("parts")
	parts, ok := pv.Array()
	if !ok {
		return nil, fmt.Errorf("%s: parts must be an array", name)
	}
	for _, p := range parts {
		pair, ok := p.Array()
		if !ok || len(pair) != 2 {
			return nil, fmt.Errorf("%s: each part must be a [unit, amount] pair", name)
		}
		unit, err := deserializeArgument(pair[0])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		var u string
		switch t := unit.(type) {
		case Symbol:
			u = string(t)
		case string:
			u = t
		default:
			return nil, fmt.Errorf("%s: part unit must be a symbol", name)
		}
		d.Parts = append(d.Parts, DurationPart{Unit: u, Amount: pair[1]})
	}
	return d, nil
}
