package sidejob

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// Log publishes an entry to /sidejob/log (SideJob.log). entry is one of:
//   - *rubyjson.Map: written as is;
//   - error: {"error": message, "backtrace": lines} where the lines come from
//     an error with a StackTrace() []string method (panics have one) up to the first line that
//     contains "sidekiq", joined with "\n"; no backtrace when there is none;
//   - string: {"message": s};
//   - anything else: converted with rubyjson.FromGo and, when it is not an
//     object, stored as {"message": value}.
//
// The published object is the log context of ctx ({"job": id} for the ctx
// a worker's Perform gets), then "timestamp", then the entry (later keys
// replace earlier ones in place). It is published inside a
// group with logging off, so ports subscribed to the log channel do not log
// again.
func (c *Client) Log(ctx context.Context, entry any) error {
	m := contextFields(ctx)
	if m == nil {
		m = rubyjson.NewMap()
	}
	m.Set("timestamp", rubyjson.StringValue(c.timestamp()))
	switch e := entry.(type) {
	case *rubyjson.Map:
		merge(m, e)
	case string:
		m.Set("message", rubyjson.StringValue(e))
	case error:
		merge(m, errorEntry(e))
	default:
		v, err := rubyjson.FromGo(entry)
		if err != nil {
			return fmt.Errorf("sidejob: log: %w", err)
		}
		if obj, ok := v.Map(); ok {
			merge(m, obj)
		} else {
			m.Set("message", v)
		}
	}
	return c.inGroup(ctx, &groupOptions{Log: opt(false)}, func(ctx context.Context) error {
		return c.Publish(ctx, sidejobwire.LogChannel, rubyjson.ObjectValue(m))
	})
}

func merge(dst, src *rubyjson.Map) {
	for i := 0; i < src.Len(); i++ {
		k, v := src.At(i)
		dst.Set(k, v)
	}
}

// errorEntry is the log entry of an exception.
func errorEntry(err error) *rubyjson.Map {
	m := rubyjson.NewMap()
	m.Set("error", rubyjson.StringValue(err.Error()))
	var st interface{ StackTrace() []string }
	if errors.As(err, &st) {
		var lines []string
		for _, l := range st.StackTrace() {
			if strings.Contains(l, "sidekiq") {
				break
			}
			lines = append(lines, l)
		}
		m.Set("backtrace", rubyjson.StringValue(strings.Join(lines, "\n")))
	}
	return m
}
