package activejob

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// This file holds the Go types of ActiveJob's serialized (non-JSON) argument
// values; activejob_args.go holds hashes and the (de)serializers.

// Symbol is a Ruby Symbol (SymbolSerializer): Symbol("sym") is :sym.
type Symbol string

// rubyJSON implements argValue.
func (s Symbol) rubyJSON() (rubyjson.Value, error) {
	return ajSerializedValue(ajSymbolSerializer, "value", rubyjson.StringValue(string(s))), nil
}

// Module is a Ruby Class or Module given by its constant name
// (ModuleSerializer), for example Module("ActiveJob::Base").
type Module string

// rubyJSON implements argValue.
func (m Module) rubyJSON() (rubyjson.Value, error) {
	return ajSerializedValue(ajModuleSerializer, "value", rubyjson.StringValue(string(m))), nil
}

// GlobalID is a GlobalID URI such as "gid://app/Person/42", the form
// ActiveJob writes for an ActiveRecord (GlobalID::Identification) object:
// {"_aj_globalid": "gid://..."}.
type GlobalID string

// rubyJSON implements argValue.
func (g GlobalID) rubyJSON() (rubyjson.Value, error) {
	m := rubyjson.NewMap()
	m.Set(ajGlobalIDKey, rubyjson.StringValue(string(g)))
	return rubyjson.ObjectValue(m), nil
}

// BigDecimal is a Ruby BigDecimal kept as its exact decimal text
// (BigDecimalSerializer, Rails 7.1+). ActiveJob 6.1 has no such serializer:
// it writes a BigDecimal as a plain JSON string (so it arrives as a String),
// and it cannot run a payload holding this marker.
type BigDecimal string

// rubyJSON implements argValue.
func (d BigDecimal) rubyJSON() (rubyjson.Value, error) {
	return ajSerializedValue(ajBigDecimalSerializer, "value", rubyjson.StringValue(string(d))), nil
}

// Date is a Ruby Date (DateSerializer): a civil date with no time of day.
type Date struct {
	Year  int // proleptic Gregorian year; 0 and negative years are allowed
	Month time.Month
	Day   int
}

// newDate returns the civil date of t in t's location.
func newDate(t time.Time) Date {
	y, m, d := t.Date()
	return Date{Year: y, Month: m, Day: d}
}

// String returns the date as Ruby's Date#iso8601 writes it ("2024-02-29",
// "-0001-01-01", "12345-01-01").
func (d Date) String() string {
	y := d.Year
	sign := ""
	if y < 0 {
		sign, y = "-", -y
	}
	return fmt.Sprintf("%s%04d-%02d-%02d", sign, y, int(d.Month), d.Day)
}

// toTime returns midnight UTC of the date.
func (d Date) toTime() time.Time { return time.Date(d.Year, d.Month, d.Day, 0, 0, 0, 0, time.UTC) }

// rubyJSON implements argValue.
func (d Date) rubyJSON() (rubyjson.Value, error) {
	return ajSerializedValue(ajDateSerializer, "value", rubyjson.StringValue(d.String())), nil
}

func parseAJDate(s string) (Date, error) {
	body, neg := strings.CutPrefix(s, "-")
	parts := strings.Split(body, "-")
	if len(parts) != 3 || len(parts[0]) < 4 || len(parts[1]) != 2 || len(parts[2]) != 2 {
		return Date{}, fmt.Errorf("invalid date %q", s)
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 {
			return Date{}, fmt.Errorf("invalid date %q", s)
		}
		n[i] = v
	}
	if neg {
		n[0] = -n[0]
	}
	d := Date{Year: n[0], Month: time.Month(n[1]), Day: n[2]}
	if n[1] < 1 || n[1] > 12 || n[2] < 1 || n[2] > 31 || newDate(d.toTime()) != d {
		return Date{}, fmt.Errorf("invalid date %q", s)
	}
	return d, nil
}

// TimeKind is the Ruby class of a time argument.
type TimeKind uint8

// The time classes ActiveJob serializes.
const (
	// TimeKindTime is a Ruby Time (TimeSerializer).
	TimeKindTime TimeKind = iota
	// TimeKindDateTime is a Ruby DateTime (DateTimeSerializer).
	TimeKindDateTime
	// TimeKindTimeWithZone is an ActiveSupport::TimeWithZone
	// (TimeWithZoneSerializer).
	TimeKindTimeWithZone
)

func (k TimeKind) serializer() string {
	switch k {
	case TimeKindDateTime:
		return ajDateTimeSerializer
	case TimeKindTimeWithZone:
		return ajTimeWithZoneSerializer
	}
	return ajTimeSerializer
}

// Time is a Ruby Time, DateTime or ActiveSupport::TimeWithZone argument. A
// plain time.Time argument encodes as a Ruby Time; use Time for the other
// classes or a zone name.
//
// Time keeps the UTC offset that was written: "Z" decodes to time.UTC, any
// other offset to a fixed zone; encoding writes "Z" only for time.UTC (as
// Ruby writes "Z" only for a UTC Time) and nine fractional digits.
type Time struct {
	Time time.Time
	Kind TimeKind
	// Zone is the "time_zone" field of a TimeWithZone (a tz name such as
	// "America/New_York", written by Rails 7.1+); "" when absent. It is
	// written back when set. When the name is a known tz database zone, Time
	// is in that location.
	Zone string
	// text is the "value" as decoded, re-emitted while it still reads as
	// Time (keeps non-canonical forms such as whole-second ones intact).
	text string
}

// rubyJSON implements argValue.
func (t Time) rubyJSON() (rubyjson.Value, error) {
	text := t.text
	if text == "" || !sameAJTime(text, t.Time) {
		text = formatAJTime(t.Time)
	}
	m := rubyjson.NewMap()
	m.Set(ajSerializerKey, rubyjson.StringValue(t.Kind.serializer()))
	m.Set("value", rubyjson.StringValue(text))
	if t.Zone != "" {
		m.Set("time_zone", rubyjson.StringValue(t.Zone))
	}
	return rubyjson.ObjectValue(m), nil
}

func sameAJTime(text string, t time.Time) bool {
	p, err := parseAJTime(text)
	if err != nil || !p.Equal(t) {
		return false
	}
	_, o1 := p.Zone()
	_, o2 := t.Zone()
	return o1 == o2 && (p.Location() == time.UTC) == (t.Location() == time.UTC)
}

// formatAJTime writes t as Ruby's Time#iso8601(9).
func formatAJTime(t time.Time) string {
	b := t.AppendFormat(nil, "2006-01-02T15:04:05.000000000")
	return string(appendAJZone(b, t))
}

func appendAJZone(b []byte, t time.Time) []byte {
	if t.Location() == time.UTC {
		return append(b, 'Z')
	}
	_, off := t.Zone()
	sign := byte('+')
	if off < 0 {
		sign, off = '-', -off
	}
	return fmt.Appendf(append(b, sign), "%02d:%02d", off/3600, off/60%60)
}

// parseAJTime reads an ISO 8601 time as Ruby's Time.iso8601 does for the
// forms ActiveJob writes: "Z" gives a UTC time, an offset a fixed zone.
func parseAJTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("invalid iso8601 time %q", s)
	}
	if strings.HasSuffix(s, "Z") || strings.HasSuffix(s, "z") {
		return t.UTC(), nil
	}
	_, off := t.Zone()
	return t.In(time.FixedZone("", off)), nil
}

// Duration is an ActiveSupport::Duration (DurationSerializer).
type Duration struct {
	// Seconds is "value", the length in seconds as Ruby wrote it: an Integer
	// or a Float.
	Seconds rubyjson.Value
	// Parts are the calendar parts in order, for example [{days 1} {hours 3}].
	Parts []DurationPart
}

// DurationPart is one part of an Duration.
type DurationPart struct {
	// Unit is the part name: "years", "months", "weeks", "days", "hours",
	// "minutes" or "seconds".
	Unit string
	// Amount is the count of Unit (an Integer, or a Float for fractions).
	Amount rubyjson.Value
}

// ajDurationUnits are ActiveSupport::Duration::PARTS_IN_SECONDS, in PARTS
// order (seconds excluded).
var ajDurationUnits = []struct {
	name string
	secs int64
}{
	{"years", 31556952}, {"months", 2629746}, {"weeks", 604800}, {"days", 86400}, {"hours", 3600}, {"minutes", 60},
}

// newDuration returns d as ActiveSupport::Duration.build(d.seconds)
// builds it: the largest parts first (a year is 365.2425 days, a month a
// twelfth of that), zero parts left out, and a Float seconds value and
// seconds part only when d has a fraction of a second.
func newDuration(d time.Duration) Duration {
	num := func(whole int64, nanos int64) rubyjson.Value {
		if nanos == 0 {
			return rubyjson.IntValue(whole)
		}
		return rubyjson.FloatValue(float64(whole) + float64(nanos)/1e9)
	}
	sign := int64(1)
	abs := d
	if d < 0 {
		sign, abs = -1, -d
	}
	out := Duration{Seconds: num(int64(d/time.Second), int64(d%time.Second))}
	rem := int64(abs / time.Second)
	nanos := int64(abs % time.Second)
	if d != 0 {
		for _, u := range ajDurationUnits {
			if n := rem / u.secs; n != 0 {
				out.Parts = append(out.Parts, DurationPart{Unit: u.name, Amount: rubyjson.IntValue(n * sign)})
			}
			rem %= u.secs
		}
	}
	if rem != 0 || nanos != 0 || len(out.Parts) == 0 {
		out.Parts = append(out.Parts, DurationPart{Unit: "seconds", Amount: num(rem*sign, nanos*sign)})
	}
	return out
}

// rubyJSON implements argValue.
func (d Duration) rubyJSON() (rubyjson.Value, error) {
	parts := make([]rubyjson.Value, len(d.Parts))
	for i, p := range d.Parts {
		sym, _ := Symbol(p.Unit).rubyJSON()
		parts[i] = rubyjson.ArrayValue(sym, p.Amount)
	}
	m := rubyjson.NewMap()
	m.Set(ajSerializerKey, rubyjson.StringValue(ajDurationSerializer))
	m.Set("value", d.Seconds)
	m.Set("parts", rubyjson.ArrayValue(parts...))
	return rubyjson.ObjectValue(m), nil
}

// Range is a Ruby Range (RangeSerializer, Rails 7.1+; ActiveJob 6.1 can
// neither write nor run it). Begin and End are arguments themselves (nil for
// an open end).
type Range struct {
	Begin, End any
	// ExcludeEnd is true for a...b, false for a..b.
	ExcludeEnd bool
}

// rubyJSON implements argValue.
func (r Range) rubyJSON() (rubyjson.Value, error) {
	b, err := serializeArgument(r.Begin)
	if err != nil {
		return rubyjson.Value{}, fmt.Errorf("range begin: %w", err)
	}
	e, err := serializeArgument(r.End)
	if err != nil {
		return rubyjson.Value{}, fmt.Errorf("range end: %w", err)
	}
	m := rubyjson.NewMap()
	m.Set(ajSerializerKey, rubyjson.StringValue(ajRangeSerializer))
	m.Set("begin", b)
	m.Set("end", e)
	m.Set("exclude_end", rubyjson.BoolValue(r.ExcludeEnd))
	return rubyjson.ObjectValue(m), nil
}

// Serialized is an object written by a serializer gojob does not know (an
// application's custom ActiveJob serializer). Object is the whole JSON
// object, "_aj_serialized" included, and is written back unchanged; values
// inside it are still in serialized form (as Decode leaves them).
type Serialized struct {
	Object *rubyjson.Map
}

// rubyJSON implements argValue.
func (s Serialized) rubyJSON() (rubyjson.Value, error) { return rubyjson.ObjectValue(s.Object), nil }
