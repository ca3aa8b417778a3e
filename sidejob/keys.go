package sidejob

import (
	"strconv"
	"time"
)

// Redis keys and pub/sub channels shared with the Ruby gem (docs/sidejob.md#redis-keys, #channels).
// Job keys are "job:<id>:<suffix>"; see JobKey.
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

// rateKey returns the run counter of a job for the minute of t (unix seconds
// / 60, integer division).
func rateKey(id int64, t time.Time) string {
	return JobKey(id) + ":rate:" + strconv.FormatInt(t.Unix()/60, 10)
}

// TimestampLayout is the format of every SideJob timestamp: Ruby's
// Time.now.utc.iso8601(9), always 9 fractional digits and a Z.
const TimestampLayout = "2006-01-02T15:04:05.000000000Z"

// Timestamp formats t as SideJob does.
func Timestamp(t time.Time) string { return t.UTC().Format(TimestampLayout) }

// ParseTimestamp reads a SideJob timestamp (any RFC 3339 form is accepted).
func ParseTimestamp(s string) (time.Time, error) { return time.Parse(time.RFC3339Nano, s) }
