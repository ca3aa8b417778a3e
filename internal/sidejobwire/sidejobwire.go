// Package sidejobwire is the part of the SideJob gem's Redis contract
// (docs/sidejob.md#redis-keys, #channels, #port-envelope) that package
// sidejob shares with the command line and the dashboard: key and channel
// names, timestamps and port envelopes, and the listings the two show.
package sidejobwire

import (
	"context"
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
