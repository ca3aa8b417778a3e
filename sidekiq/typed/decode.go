package typed

import (
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"time"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/activejob"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// ArgError is a job argument that does not decode into its Go type.
type ArgError struct {
	// Class is the job's class (the ActiveJob class for a wrapper job).
	Class string
	// Arg names the argument in Ruby's terms: args[1], args[0]["user_id"],
	// args[0]["tags"][2]; "args" for a wrong argument count.
	Arg string
	// Field is the Go field it binds to ("SendEmail.UserID"), "" for none.
	Field string
	// Type is the Go type it was to decode into.
	Type reflect.Type
	// Got describes what the payload holds (`string "abc"`, "missing").
	Got string
}

func (e *ArgError) Error() string {
	f := ""
	if e.Field != "" {
		f = " (" + e.Field + ")"
	}
	return fmt.Sprintf("typed: %s %s%s: cannot decode %s into %s", e.Class, e.Arg, f, e.Got, e.Type)
}

// Decode decodes job's arguments into a T (see the package doc).
func Decode[T any](job *wire.Job) (T, error) {
	var out T
	err := decodeInto(job, reflect.ValueOf(&out).Elem())
	return out, err
}

func decodeInto(job *wire.Job, dst reflect.Value) error {
	class := job.Class()
	var args []any
	if contract.IsActiveJob(job) {
		aj, err := activejob.Decode(job)
		if err != nil {
			return err // a malformed wrapper: activejob names what is wrong
		}
		class = aj.JobClass
		args = aj.Arguments
	} else {
		raw := job.Args()
		args = make([]any, len(raw))
		for i, v := range raw {
			args[i] = v
		}
	}
	d := decoder{class: class}
	t := dst.Type()
	if isPositional(t) {
		si := infoOf(t)
		if len(args) > len(si.fields) {
			return &ArgError{Class: class, Arg: "args", Type: t, Got: fmt.Sprintf("%d arguments (%s takes %d)", len(args), t, len(si.fields))}
		}
		for i, f := range si.fields {
			path := "args[" + strconv.Itoa(i) + "]"
			fname := t.Name() + "." + f.name
			if i >= len(args) {
				if f.optional {
					continue
				}
				return &ArgError{Class: class, Arg: path, Field: fname, Type: t.FieldByIndex(f.index).Type, Got: "missing"}
			}
			if err := d.decode(args[i], dst.FieldByIndex(f.index)); err != nil {
				return prefix(err, path, fname)
			}
		}
		return nil
	}
	if len(args) != 1 {
		return &ArgError{Class: class, Arg: "args", Type: t, Got: fmt.Sprintf("%d arguments (%s takes 1)", len(args), t)}
	}
	if err := d.decode(args[0], dst); err != nil {
		return prefix(err, "args[0]", "")
	}
	return nil
}

type decoder struct{ class string }

var (
	valueType    = reflect.TypeFor[rubyjson.Value]()
	timeType     = reflect.TypeFor[time.Time]()
	durationType = reflect.TypeFor[time.Duration]()
	bigIntType   = reflect.TypeFor[*big.Int]()
)

// fail is the error of a value that does not decode into t; the callers
// up the tree prefix its Arg with their part of the path (prefix), so that
// a success builds no path.
func (d *decoder) fail(t reflect.Type, v any) error {
	return &ArgError{Class: d.class, Type: t, Got: describe(v)}
}

// prefix puts seg before an ArgError's Arg, and sets its Field when no
// inner struct field did.
func prefix(err error, seg, field string) error {
	if ae, ok := err.(*ArgError); ok {
		ae.Arg = seg + ae.Arg
		if ae.Field == "" {
			ae.Field = field
		}
	}
	return err
}

// describe says what a payload value is, briefly.
func describe(v any) string {
	const max = 40
	q := func(s string) string {
		if len(s) > max {
			s = s[:max] + "…"
		}
		return strconv.Quote(s)
	}
	switch x := v.(type) {
	case nil:
		return "null"
	case rubyjson.Value:
		switch x.Kind() {
		case rubyjson.Null:
			return "null"
		case rubyjson.String:
			s, _ := x.Str()
			return "string " + q(s)
		case rubyjson.Integer:
			return "integer " + string(x.Encode())
		case rubyjson.Float:
			return "float " + string(x.Encode())
		case rubyjson.Bool:
			b, _ := x.Bool()
			return strconv.FormatBool(b)
		case rubyjson.Array:
			return "array"
		case rubyjson.Object:
			return "hash"
		}
	case string:
		return "string " + q(x)
	case bool:
		return strconv.FormatBool(x)
	case int64:
		return "integer " + strconv.FormatInt(x, 10)
	case *big.Int:
		return "integer " + x.String()
	case float64:
		return "float " + strconv.FormatFloat(x, 'g', -1, 64)
	case []any:
		return "array"
	case *activejob.Hash:
		return "hash"
	}
	return fmt.Sprintf("ActiveJob %T", v)
}

// intOf reads an integer payload value.
func intOf(v any) (*big.Int, bool) {
	switch x := v.(type) {
	case rubyjson.Value:
		if x.Kind() == rubyjson.Integer {
			return x.BigInt()
		}
	case int64:
		return big.NewInt(x), true
	case *big.Int:
		return x, true
	}
	return nil, false
}

// smallInt reads an integer that fits an int64 without allocating.
func smallInt(v any) (int64, bool) {
	switch x := v.(type) {
	case rubyjson.Value:
		if x.Kind() == rubyjson.Integer {
			return x.Int()
		}
	case int64:
		return x, true
	}
	return 0, false
}

// floatOf reads a number (Integer or Float).
func floatOf(v any) (float64, bool) {
	switch x := v.(type) {
	case rubyjson.Value:
		return x.Float()
	case int64:
		return float64(x), true
	case *big.Int:
		f, _ := new(big.Float).SetInt(x).Float64()
		return f, true
	case float64:
		return x, true
	case activejob.BigDecimal:
		f, err := strconv.ParseFloat(string(x), 64)
		return f, err == nil
	}
	return 0, false
}

// strOf reads a string: Ruby's JSON writes a Symbol as its name, and
// ActiveJob's symbols, modules and GlobalIDs are names too.
func strOf(v any) (string, bool) {
	switch x := v.(type) {
	case rubyjson.Value:
		return x.Str()
	case string:
		return x, true
	case activejob.Symbol:
		return string(x), true
	case activejob.Module:
		return string(x), true
	case activejob.GlobalID:
		return string(x), true
	case activejob.BigDecimal:
		return string(x), true
	}
	return "", false
}

func isNull(v any) bool {
	if x, ok := v.(rubyjson.Value); ok {
		return x.Kind() == rubyjson.Null
	}
	return v == nil
}

// elems reads an array.
func elems(v any) ([]any, bool) {
	switch x := v.(type) {
	case rubyjson.Value:
		a, ok := x.Array()
		if !ok {
			return nil, false
		}
		out := make([]any, len(a))
		for i, e := range a {
			out[i] = e
		}
		return out, true
	case []any:
		return x, true
	}
	return nil, false
}

// entry is one key of a hash.
type entry struct {
	key string
	val any
}

// entries reads a hash: a JSON object, or an ActiveJob hash of any kind
// (symbol keys read as their names).
func entries(v any) ([]entry, bool) {
	switch x := v.(type) {
	case rubyjson.Value:
		m, ok := x.Map()
		if !ok {
			return nil, false
		}
		out := make([]entry, m.Len())
		for i := range out {
			k, e := m.At(i)
			out[i] = entry{k, e}
		}
		return out, true
	case *activejob.Hash:
		out := make([]entry, len(x.Entries))
		for i, e := range x.Entries {
			out[i] = entry{e.Key, e.Value}
		}
		return out, true
	}
	return nil, false
}

// timeOf reads a time: epoch seconds, an ISO 8601 string, Ruby's Time#to_s
// ("2024-01-02 03:04:05 +0000", what JSON.generate writes for a Time), or
// an ActiveJob Time or Date.
func timeOf(v any) (time.Time, bool) {
	switch x := v.(type) {
	case activejob.Time:
		return x.Time, true
	case activejob.Date:
		return time.Date(x.Year, x.Month, x.Day, 0, 0, 0, 0, time.UTC), true
	}
	if f, ok := floatOf(v); ok {
		return epoch(f), true
	}
	if s, ok := strOf(v); ok {
		for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05 -0700", "2006-01-02 15:04:05 MST", "2006-01-02"} {
			if t, err := time.Parse(layout, s); err == nil {
				return t, true
			}
		}
	}
	return time.Time{}, false
}

func durationOf(v any) (time.Duration, bool) {
	if x, ok := v.(activejob.Duration); ok {
		v = x.Seconds
	}
	f, ok := floatOf(v)
	if !ok || math.Abs(f) > math.MaxInt64/float64(time.Second) {
		return 0, false
	}
	return time.Duration(math.Round(f * float64(time.Second))), true
}

// plain converts a payload value for an interface field: plain Go values
// for JSON, ActiveJob values as activejob decoded them.
func plain(v any) any {
	switch x := v.(type) {
	case rubyjson.Value:
		return x.Interface()
	}
	return v
}

func (d *decoder) decode(v any, dst reflect.Value) error {
	t := dst.Type()
	if _, raw := v.(rubyjson.Value); !raw && v != nil && t.Kind() != reflect.Interface {
		// An ActiveJob value into a field of its own type (activejob.Time,
		// activejob.Symbol, *activejob.Hash...): kept as decoded.
		if xv := reflect.ValueOf(v); xv.Type() == t {
			dst.Set(xv)
			return nil
		}
	}
	switch t {
	case valueType:
		x, ok := v.(rubyjson.Value)
		if !ok {
			return d.fail(t, v)
		}
		dst.Set(reflect.ValueOf(x.Clone()))
		return nil
	case timeType:
		tm, ok := timeOf(v)
		if !ok {
			return d.fail(t, v)
		}
		dst.Set(reflect.ValueOf(tm))
		return nil
	case durationType:
		du, ok := durationOf(v)
		if !ok {
			return d.fail(t, v)
		}
		dst.SetInt(int64(du))
		return nil
	case bigIntType:
		if isNull(v) {
			dst.SetZero()
			return nil
		}
		b, ok := intOf(v)
		if !ok {
			return d.fail(t, v)
		}
		dst.Set(reflect.ValueOf(new(big.Int).Set(b)))
		return nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		if isNull(v) {
			dst.SetZero()
			return nil
		}
		p := reflect.New(t.Elem())
		if err := d.decode(v, p.Elem()); err != nil {
			return err
		}
		dst.Set(p)
		return nil
	case reflect.Interface:
		x := plain(v)
		if x == nil {
			dst.SetZero()
			return nil
		}
		xv := reflect.ValueOf(x)
		if !xv.Type().AssignableTo(t) {
			return d.fail(t, v)
		}
		dst.Set(xv)
		return nil
	case reflect.Bool:
		var b bool
		var ok bool
		if x, isV := v.(rubyjson.Value); isV {
			b, ok = x.Bool()
		} else {
			b, ok = v.(bool)
		}
		if !ok {
			return d.fail(t, v)
		}
		dst.SetBool(b)
		return nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if n, ok := smallInt(v); ok && !dst.OverflowInt(n) {
			dst.SetInt(n)
			return nil
		}
		b, ok := intOf(v)
		if !ok || !b.IsInt64() || dst.OverflowInt(b.Int64()) {
			return d.fail(t, v)
		}
		dst.SetInt(b.Int64())
		return nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if n, ok := smallInt(v); ok && n >= 0 && !dst.OverflowUint(uint64(n)) {
			dst.SetUint(uint64(n))
			return nil
		}
		b, ok := intOf(v)
		if !ok || !b.IsUint64() || dst.OverflowUint(b.Uint64()) {
			return d.fail(t, v)
		}
		dst.SetUint(b.Uint64())
		return nil
	case reflect.Float32, reflect.Float64:
		f, ok := floatOf(v)
		if !ok || dst.OverflowFloat(f) {
			return d.fail(t, v)
		}
		dst.SetFloat(f)
		return nil
	case reflect.String:
		s, ok := strOf(v)
		if !ok {
			return d.fail(t, v)
		}
		dst.SetString(s)
		return nil
	case reflect.Slice:
		if isNull(v) {
			dst.SetZero()
			return nil
		}
		a, ok := elems(v)
		if !ok {
			return d.fail(t, v)
		}
		s := reflect.MakeSlice(t, len(a), len(a))
		for i, e := range a {
			if err := d.decode(e, s.Index(i)); err != nil {
				return prefix(err, "["+strconv.Itoa(i)+"]", "")
			}
		}
		dst.Set(s)
		return nil
	case reflect.Array:
		a, ok := elems(v)
		if !ok || len(a) != t.Len() {
			return d.fail(t, v)
		}
		for i, e := range a {
			if err := d.decode(e, dst.Index(i)); err != nil {
				return prefix(err, "["+strconv.Itoa(i)+"]", "")
			}
		}
		return nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return d.fail(t, v)
		}
		if isNull(v) {
			dst.SetZero()
			return nil
		}
		es, ok := entries(v)
		if !ok {
			return d.fail(t, v)
		}
		m := reflect.MakeMapWithSize(t, len(es))
		for _, e := range es {
			ev := reflect.New(t.Elem()).Elem()
			if err := d.decode(e.val, ev); err != nil {
				return prefix(err, "["+strconv.Quote(e.key)+"]", "")
			}
			m.SetMapIndex(reflect.ValueOf(e.key).Convert(t.Key()), ev)
		}
		dst.Set(m)
		return nil
	case reflect.Struct:
		si := infoOf(t)
		if si.positional {
			a, ok := elems(v)
			if !ok || len(a) > len(si.fields) {
				return d.fail(t, v)
			}
			for i, f := range si.fields {
				if i >= len(a) {
					if f.optional {
						continue
					}
					return &ArgError{Class: d.class, Arg: "[" + strconv.Itoa(i) + "]", Field: t.Name() + "." + f.name, Type: t.FieldByIndex(f.index).Type, Got: "missing"}
				}
				if err := d.decode(a[i], dst.FieldByIndex(f.index)); err != nil {
					return prefix(err, "["+strconv.Itoa(i)+"]", t.Name()+"."+f.name)
				}
			}
			return nil
		}
		es, ok := entries(v)
		if !ok {
			return d.fail(t, v)
		}
		for _, e := range es {
			i, ok := si.byKey[e.key]
			if !ok {
				continue // Ruby's perform ignores keys it does not read
			}
			f := si.fields[i]
			if err := d.decode(e.val, dst.FieldByIndex(f.index)); err != nil {
				return prefix(err, "["+strconv.Quote(e.key)+"]", t.Name()+"."+f.name)
			}
		}
		return nil
	}
	return d.fail(t, v)
}

// epoch converts epoch seconds to a UTC time to the nearest nanosecond
// (Ruby's Time.at(float) keeps the float's exact value; whole seconds and
// their fraction are split first so that no precision is lost in between).
func epoch(f float64) time.Time {
	sec := math.Floor(f)
	ns := math.Round((f - sec) * 1e9)
	return time.Unix(int64(sec), int64(ns)).UTC()
}
