package sidejob

import (
	"context"
	"fmt"

	"github.com/gojob/gojob/sidekiq/rubyjson"
)

type ctxKey int

const (
	logContextKey ctxKey = iota
	groupKey
)

// withContext returns a ctx whose SideJob log context has key set to value
// (the Go form of SideJob.context(key => value) { }): the runtime sets
// "job" for a run, Publish sets "channel". Every log entry and every port
// write made with the returned ctx carries the context. Keys keep
// the order in which they were first set; setting a key again replaces its
// value in place. value is converted with rubyjson.FromGo; a value that has
// no JSON form is stored as its fmt.Sprint text.
func withContext(ctx context.Context, key string, value any) context.Context {
	v, err := rubyjson.FromGo(value)
	if err != nil {
		v = rubyjson.StringValue(fmt.Sprint(value))
	}
	m := rubyjson.NewMap()
	m.Set(key, v)
	return withContextMap(ctx, m)
}

// withContextMap merges fields into the log context of ctx. An empty (or
// nil) map still activates a context, so port envelopes written with the
// returned ctx carry "context":{}, as in Ruby.
func withContextMap(ctx context.Context, fields *rubyjson.Map) context.Context {
	cur, _ := ctx.Value(logContextKey).(*rubyjson.Map)
	next := rubyjson.NewMap()
	if cur != nil {
		next = cur.Clone()
	}
	for i := 0; i < fields.Len(); i++ {
		k, v := fields.At(i)
		next.Set(k, v.Clone())
	}
	return context.WithValue(ctx, logContextKey, next)
}

// contextFields returns a copy of the log context of ctx, or nil when no
// context is active.
func contextFields(ctx context.Context) *rubyjson.Map {
	cur, _ := ctx.Value(logContextKey).(*rubyjson.Map)
	if cur == nil {
		return nil
	}
	return cur.Clone()
}
