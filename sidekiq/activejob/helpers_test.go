package activejob

// Builders and accessors of argument values that the tests use; the
// package itself reads and writes them through Decode and
// serializeArguments.

import (
	"errors"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// symbolHash returns a Ruby Hash with Symbol keys from m, keys sorted
// (Go maps have no order): {a: 1, b: 2}.
func symbolHash(m map[string]any) *Hash { return ajHashFrom(HashPlain, m, true) }

// indifferentHash returns a HashWithIndifferentAccess from m, keys sorted.
func indifferentHash(m map[string]any) *Hash { return ajHashFrom(HashIndifferent, m, false) }

// count returns the number of entries.
func (h *Hash) count() int { return len(h.Entries) }

// setString sets a String key, keeping the position (and Symbol-ness) of an
// existing key.
func (h *Hash) setString(key string, v any) { h.set(key, false, v) }

// setSymbol sets a Symbol key, keeping the position of an existing key.
func (h *Hash) setSymbol(key string, v any) { h.set(key, true, v) }

// toMap returns the entries as a Go map (key order and Symbol-ness are lost).
func (h *Hash) toMap() map[string]any {
	out := make(map[string]any, len(h.Entries))
	for _, e := range h.Entries {
		out[e.Key] = e.Value
	}
	return out
}

// modelName returns the model class name ("Person" in gid://app/Person/42).
func (g GlobalID) modelName() string { _, model, _ := g.parts(); return model }

// modelID returns the model id ("42" in gid://app/Person/42), without any
// query parameters.
func (g GlobalID) modelID() string { _, _, id := g.parts(); return id }

// rat returns the exact value. It returns false for text big.Rat cannot
// read (for example "NaN" or "Infinity").
func (d BigDecimal) rat() (*big.Rat, bool) { return new(big.Rat).SetString(string(d)) }

// toFloat64 returns the nearest float64.
func (d BigDecimal) toFloat64() (float64, bool) {
	f, err := strconv.ParseFloat(string(d), 64)
	return f, err == nil || errors.Is(err, strconv.ErrRange)
}

// std returns the length as a time.Duration (from Seconds).
func (d Duration) std() time.Duration {
	f, _ := d.Seconds.Float()
	return time.Duration(f * float64(time.Second))
}

// newSerialized builds a custom-serializer object: "_aj_serialized" first
// (as ObjectSerializer#serialize writes it), then fields in order.
func newSerialized(serializer string, fields *rubyjson.Map) Serialized {
	m := rubyjson.NewMap()
	m.Set(ajSerializerKey, rubyjson.StringValue(serializer))
	for i := range fields.Len() {
		k, v := fields.At(i)
		m.Set(k, v)
	}
	return Serialized{Object: m}
}

func (h *Hash) set(key string, sym bool, v any) {
	for i := range h.Entries {
		if h.Entries[i].Key == key {
			h.Entries[i].Value = v
			return
		}
	}
	h.Entries = append(h.Entries, HashEntry{Key: key, Symbol: sym, Value: v})
}

// app returns the application part of the URI ("app" in gid://app/Model/1).
func (g GlobalID) app() string { app, _, _ := g.parts(); return app }

// serializer returns the serializer class name.
func (s Serialized) serializer() string {
	v, _ := s.Object.Get(ajSerializerKey)
	str, _ := v.Str()
	return str
}

func (g GlobalID) parts() (app, model, id string) {
	rest, ok := strings.CutPrefix(string(g), "gid://")
	if !ok {
		return "", "", ""
	}
	rest, _, _ = strings.Cut(rest, "?")
	app, rest, _ = strings.Cut(rest, "/")
	model, id, _ = strings.Cut(rest, "/")
	return app, model, id
}
