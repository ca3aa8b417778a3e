package rubyjson

import (
	"fmt"
	"maps"
	"math"
	"math/big"
	"slices"
	"strconv"
)

// Kind is the JSON type of a Value.
type Kind uint8

// The JSON kinds. Numbers are split by their lexical type, as Ruby's
// JSON.parse splits them: a literal with a fraction or an exponent is a Float,
// any other is an Integer (of any size).
const (
	Null Kind = iota
	Bool
	Integer
	Float
	String
	Array
	Object
)

func (k Kind) String() string {
	switch k {
	case Null:
		return "null"
	case Bool:
		return "bool"
	case Integer:
		return "integer"
	case Float:
		return "float"
	case String:
		return "string"
	case Array:
		return "array"
	case Object:
		return "object"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Value is one JSON value as Ruby sees it. The zero Value is null.
//
// Numbers keep their text in the form Ruby's generator writes them (integers
// exactly, floats in Float#to_s form), so decoding and re-encoding never
// changes a number that Ruby wrote.
type Value struct {
	kind Kind
	b    bool
	// unshaped marks a decoded Float whose text may not be in Float#to_s
	// form yet (more than 15 significant digits or an exponent): it is put
	// in that form when the value is written or its text read, not at
	// decode time, since a fetched job is mostly never re-encoded and
	// shaping takes a ParseFloat and a FormatFloat per float.
	unshaped bool
	s        string // string value, or number text
	// obj holds an object's members, or an array's elements (in vals,
	// with no keys): one pointer instead of a slice and a pointer keeps a
	// Value at 32 bytes, and decoding a job copies and clears fewer of them.
	obj *Map
}

// elems returns an array's elements (nil for any other value).
func (v Value) elems() []Value {
	if v.kind != Array || v.obj == nil {
		return nil
	}
	return v.obj.vals
}

// arrayOf returns the array of vs (not copied).
func arrayOf(vs []Value) Value { return Value{kind: Array, obj: &Map{vals: vs}} }

// floatText returns a Float's text in Float#to_s form.
func (v Value) floatText() string {
	if !v.unshaped {
		return v.s
	}
	return shapeFloat(v.s)
}

// BoolValue returns a JSON boolean.
func BoolValue(b bool) Value { return Value{kind: Bool, b: b} }

// StringValue returns a JSON string.
func StringValue(s string) Value { return Value{kind: String, s: s} }

// IntValue returns a JSON integer.
func IntValue(i int64) Value { return Value{kind: Integer, s: strconv.FormatInt(i, 10)} }

// FloatValue returns a JSON float written as Ruby's Float#to_s writes it
// (always with a fraction or an exponent). NaN and infinities, which Ruby's
// generator refuses, are written as null.
func FloatValue(f float64) Value {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return Value{}
	}
	return Value{kind: Float, s: formatFloat(f)}
}

// ArrayValue returns a JSON array of the given values.
func ArrayValue(vs ...Value) Value {
	if vs == nil {
		vs = []Value{}
	}
	return arrayOf(vs)
}

// ObjectValue returns a JSON object backed by m (not copied).
func ObjectValue(m *Map) Value {
	if m == nil {
		m = NewMap()
	}
	return Value{kind: Object, obj: m}
}

// Kind returns the JSON kind of v.
func (v Value) Kind() Kind { return v.kind }

// Truthy reports whether Ruby treats v as true: everything but null and false.
func (v Value) Truthy() bool { return !(v.kind == Null || (v.kind == Bool && !v.b)) }

// Bool returns the boolean and whether v is one.
func (v Value) Bool() (bool, bool) { return v.b, v.kind == Bool }

// Str returns the string and whether v is one.
func (v Value) Str() (string, bool) {
	if v.kind != String {
		return "", false
	}
	return v.s, true
}

// Int returns v as an int64 when it is an Integer that fits, or a Float with
// no fractional part that fits.
func (v Value) Int() (int64, bool) {
	switch v.kind {
	case Integer:
		i, err := strconv.ParseInt(v.s, 10, 64)
		return i, err == nil
	case Float:
		f, err := strconv.ParseFloat(v.s, 64)
		if err != nil || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
			return 0, false
		}
		return int64(f), true
	}
	return 0, false
}

// Float returns v as a float64 when it is a number.
func (v Value) Float() (float64, bool) {
	if v.kind != Integer && v.kind != Float {
		return 0, false
	}
	f, err := strconv.ParseFloat(v.s, 64)
	if err != nil && !isRangeErr(err) {
		return 0, false
	}
	return f, true
}

// BigInt returns an Integer of any size.
func (v Value) BigInt() (*big.Int, bool) {
	if v.kind != Integer {
		return nil, false
	}
	return new(big.Int).SetString(v.s, 10)
}

// Array returns the elements and whether v is an array. The slice is shared.
func (v Value) Array() ([]Value, bool) { return v.elems(), v.kind == Array }

// Map returns the object and whether v is one. The Map is shared.
func (v Value) Map() (*Map, bool) {
	if v.kind != Object {
		return nil, false
	}
	return v.obj, true
}

// Clone returns a deep copy of v.
func (v Value) Clone() Value {
	switch v.kind {
	case Array:
		in := v.elems()
		out := make([]Value, len(in))
		for i, e := range in {
			out[i] = e.Clone()
		}
		return arrayOf(out)
	case Object:
		return Value{kind: Object, obj: v.obj.Clone()}
	}
	return v
}

// Equal reports whether a and b encode to the same JSON.
func Equal(a, b Value) bool {
	if a.kind != b.kind {
		return false
	}
	switch a.kind {
	case Null:
		return true
	case Bool:
		return a.b == b.b
	case Integer, String:
		return a.s == b.s
	case Float:
		return a.floatText() == b.floatText()
	case Array:
		ae, be := a.elems(), b.elems()
		if len(ae) != len(be) {
			return false
		}
		for i := range ae {
			if !Equal(ae[i], be[i]) {
				return false
			}
		}
		return true
	case Object:
		if a.obj.Len() != b.obj.Len() {
			return false
		}
		for i := range a.obj.keys {
			if a.obj.keys[i] != b.obj.keys[i] || !Equal(a.obj.vals[i], b.obj.vals[i]) {
				return false
			}
		}
		return true
	}
	return false
}

// Interface converts v to plain Go values: nil, bool, int64 (or *big.Int when
// it does not fit), float64, string, []any and map[string]any. The key order of
// objects is lost; use Map to keep it.
func (v Value) Interface() any {
	switch v.kind {
	case Bool:
		return v.b
	case Integer:
		if i, err := strconv.ParseInt(v.s, 10, 64); err == nil {
			return i
		}
		b, _ := new(big.Int).SetString(v.s, 10)
		return b
	case Float:
		f, _ := v.Float()
		return f
	case String:
		return v.s
	case Array:
		in := v.elems()
		out := make([]any, len(in))
		for i, e := range in {
			out[i] = e.Interface()
		}
		return out
	case Object:
		out := make(map[string]any, v.obj.Len())
		for i, k := range v.obj.keys {
			out[k] = v.obj.vals[i].Interface()
		}
		return out
	}
	return nil
}

// FromGo converts a Go value to a Value. It accepts nil, bool, all integer and
// float types, string, []byte (as a string), *big.Int, json-like slices and
// maps with string keys (map keys are sorted, since Go maps have no order),
// Value and *Map. Other types are an error.
func FromGo(x any) (Value, error) {
	switch t := x.(type) {
	case nil:
		return Value{}, nil
	case Value:
		return t, nil
	case *Map:
		return ObjectValue(t), nil
	case bool:
		return BoolValue(t), nil
	case string:
		return StringValue(t), nil
	case []byte:
		return StringValue(string(t)), nil
	case int:
		return IntValue(int64(t)), nil
	case int8:
		return IntValue(int64(t)), nil
	case int16:
		return IntValue(int64(t)), nil
	case int32:
		return IntValue(int64(t)), nil
	case int64:
		return IntValue(t), nil
	case uint:
		return Value{kind: Integer, s: strconv.FormatUint(uint64(t), 10)}, nil
	case uint8:
		return IntValue(int64(t)), nil
	case uint16:
		return IntValue(int64(t)), nil
	case uint32:
		return IntValue(int64(t)), nil
	case uint64:
		return Value{kind: Integer, s: strconv.FormatUint(t, 10)}, nil
	case float32:
		return FloatValue(float64(t)), nil
	case float64:
		return FloatValue(t), nil
	case *big.Int:
		return Value{kind: Integer, s: t.String()}, nil
	case []any:
		out := make([]Value, len(t))
		for i, e := range t {
			v, err := FromGo(e)
			if err != nil {
				return Value{}, err
			}
			out[i] = v
		}
		return ArrayValue(out...), nil
	case []string:
		out := make([]Value, len(t))
		for i, e := range t {
			out[i] = StringValue(e)
		}
		return ArrayValue(out...), nil
	case map[string]any:
		m := NewMap()
		for _, k := range slices.Sorted(maps.Keys(t)) {
			v, err := FromGo(t[k])
			if err != nil {
				return Value{}, fmt.Errorf("key %q: %w", k, err)
			}
			m.Set(k, v)
		}
		return ObjectValue(m), nil
	case map[string]string:
		m := NewMap()
		for _, k := range slices.Sorted(maps.Keys(t)) {
			m.Set(k, StringValue(t[k]))
		}
		return ObjectValue(m), nil
	}
	return Value{}, fmt.Errorf("rubyjson: cannot convert %T to JSON", x)
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}
