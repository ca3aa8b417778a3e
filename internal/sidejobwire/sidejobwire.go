// Package sidejobwire is the part of the SideJob gem's Redis contract
// (docs/sidejob.md#redis-keys, #channels, #port-envelope) that package
// sidejob shares with the command line and the dashboard: key and channel
// names, timestamps and port envelopes, and the listings the two show.
package sidejobwire

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// Keys and pub/sub channels shared with the Ruby gem. Job keys are
// "job:<id>:<suffix>"; see JobKey.
const (
	// KeyJobs is the set of live job ids.
	KeyJobs = "jobs"
	// KeyLastID is the id counter (INCR; the first id is 1).
	KeyLastID = "jobs:last_id"
	// KeyAliases is the hash alias → job id.
	KeyAliases = "jobs:aliases"
	// LogChannel receives every SideJob.log entry.
	LogChannel = "/sidejob/log"
)

// JobKey returns the key prefix of a job, "job:<id>" (Ruby's redis_key and
// to_s).
func JobKey(id int64) string { return "job:" + strconv.FormatInt(id, 10) }

// PortKey returns the data list of a port, "job:<id>:<in|out>:<name>"
// (Ruby's Port#redis_key); typ is "in" or "out".
func PortKey(id int64, typ, name string) string { return JobKey(id) + ":" + typ + ":" + name }

// ChannelKey returns the set of job ids that may listen on channel.
func ChannelKey(channel string) string { return "channel:" + channel }

// WorkersKey returns the worker registry hash of a queue.
func WorkersKey(queue string) string { return "workers:" + queue }

// JobChannel returns the pub/sub channel of a job, where status changes and
// deletion are published.
func JobChannel(id int64) string { return "/sidejob/job/" + strconv.FormatInt(id, 10) }

// WorkersChannel returns the channel the registry of a queue is published to.
func WorkersChannel(queue string) string { return "/sidejob/workers/" + queue }

// TimestampLayout is the format of every SideJob timestamp: Ruby's
// Time.now.utc.iso8601(9), always 9 fractional digits and a Z.
const TimestampLayout = "2006-01-02T15:04:05.000000000Z"

// Timestamp formats t as SideJob does.
func Timestamp(t time.Time) string { return t.UTC().Format(TimestampLayout) }

// ParseTimestamp reads a SideJob timestamp (any RFC 3339 form is accepted).
func ParseTimestamp(s string) (time.Time, error) { return time.Parse(time.RFC3339Nano, s) }

// DecodeEnvelope reads a port envelope (Port.decode_data): the value is the
// "data" field (null when missing); context and options default to {}. For
// data written by SideJob before 4.1 (plain JSON, not an object with
// "data"), the whole document is the value.
func DecodeEnvelope(raw []byte) (value rubyjson.Value, context, options *rubyjson.Map, err error) {
	v, err := rubyjson.Parse(raw)
	if err != nil {
		return rubyjson.Value{}, nil, nil, fmt.Errorf("sidejob: decode port data: %w", err)
	}
	context, options = rubyjson.NewMap(), rubyjson.NewMap()
	obj, ok := v.Map()
	if !ok || !obj.Has("data") {
		return v, context, options, nil
	}
	value, _ = obj.Get("data")
	if cx, ok := obj.Get("context"); ok {
		if m, isObj := cx.Map(); isObj {
			context = m
		}
	}
	if op, ok := obj.Get("options"); ok {
		if m, isObj := op.Map(); isObj {
			options = m
		}
	}
	return value, context, options, nil
}

// JobIDs returns the ids of all live jobs (the set KeyJobs), in ascending
// order.
func JobIDs(ctx context.Context, conn redis.Conn) ([]int64, error) {
	ids, err := redis.Int64s(redis.DoContext(conn, ctx, "SMEMBERS", KeyJobs))
	if err != nil {
		return nil, fmt.Errorf("sidejob: list jobs: %w", err)
	}
	slices.Sort(ids)
	return ids, nil
}

// DecodeChannels reads a value of a job's inports:channels or
// outports:channels hash, a JSON array of channel names (null is none).
func DecodeChannels(s string) ([]string, error) {
	v, err := rubyjson.Parse([]byte(s))
	if err != nil {
		return nil, err
	}
	if v.Kind() == rubyjson.Null {
		return nil, nil
	}
	arr, ok := v.Array()
	if !ok {
		return nil, errors.New("not a JSON array")
	}
	out := make([]string, 0, len(arr))
	for _, e := range arr {
		if str, ok := e.Str(); ok {
			out = append(out, str)
		}
	}
	return out, nil
}

// PortView is a port as the command line and the dashboard list it.
type PortView struct {
	// Type is "in" or "out".
	Type string
	Name string
	// Size is the number of values waiting (LLEN of the data list).
	Size int64
	// HasDefault tells whether the port has a default; Default is its
	// value then.
	HasDefault bool
	Default    rubyjson.Value
	// Channels are the port's channels ([] when none).
	Channels []string
}

// Ports reads the ports of job id: its input ports, then its output ports,
// each sorted by name ("*" is left out), as Ruby's inports and outports
// list them. A job that does not exist has none.
func Ports(ctx context.Context, conn redis.Conn, id int64) ([]PortView, error) {
	var out []PortView
	for _, typ := range []string{"in", "out"} {
		names, err := redis.Strings(redis.DoContext(conn, ctx, "SMEMBERS", JobKey(id)+":"+typ+"ports"))
		if err != nil {
			return nil, fmt.Errorf("sidejob: job %d %sports: %w", id, typ, err)
		}
		slices.Sort(names)
		for _, name := range names {
			if name == "*" {
				continue
			}
			v, err := portView(ctx, conn, id, typ, name)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
	}
	return out, nil
}

func portView(ctx context.Context, conn redis.Conn, id int64, typ, name string) (PortView, error) {
	v := PortView{Type: typ, Name: name, Channels: []string{}}
	conn.Send("LLEN", PortKey(id, typ, name))
	conn.Send("HGET", JobKey(id)+":"+typ+"ports:default", name)
	conn.Send("HGET", JobKey(id)+":"+typ+"ports:channels", name)
	replies, err := redis.Values(redis.DoContext(conn, ctx, ""))
	if err == nil && len(replies) != 3 {
		err = errors.New("short reply")
	}
	if err != nil {
		return v, fmt.Errorf("sidejob: job %d %sport %s: %w", id, typ, name, err)
	}
	v.Size, _ = redis.Int64(replies[0], nil)
	if raw, err := redis.Bytes(replies[1], nil); err == nil {
		if v.Default, _, _, err = DecodeEnvelope(raw); err != nil {
			return v, err
		}
		v.HasDefault = true
	}
	if raw, err := redis.String(replies[2], nil); err == nil {
		if v.Channels, err = DecodeChannels(raw); err != nil {
			return v, fmt.Errorf("sidejob: job %d %sport %s channels: %w", id, typ, name, err)
		}
	}
	return v, nil
}
