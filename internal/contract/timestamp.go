package contract

import (
	"math"
	"strconv"
	"time"

	"github.com/gojob/gojob/internal/rubyfloat"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// FromEpochSeconds converts float epoch seconds to a time.
func FromEpochSeconds(f float64) time.Time {
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(math.Round(frac*1e9)))
}

// EpochSeconds converts t to float epoch seconds, as Ruby's Time#to_f.
func EpochSeconds(t time.Time) float64 {
	return float64(t.Unix()) + float64(t.Nanosecond())/1e9
}

// TimestampValue returns t in the job-timestamp format of version v: float
// seconds that always carry a fraction (6.x, 7.x) or integer milliseconds
// (8.x).
func TimestampValue(t time.Time, v wire.Version) rubyjson.Value {
	if MillisecondTimestamps(v) {
		return rubyjson.IntValue(t.UnixMilli())
	}
	return rubyjson.FloatValue(EpochSeconds(t))
}

// Score returns the sorted-set score string of t: float seconds in Ruby's
// Float#to_s form, in every version.
func Score(t time.Time) string { return rubyfloat.Format(EpochSeconds(t)) }

// ParseScore parses a score as Redis returns it.
func ParseScore(s string) (float64, error) { return strconv.ParseFloat(s, 64) }

// FormatScore writes a score as Ruby's Float#to_s; Redis reads it back as
// the same double.
func FormatScore(f float64) string { return rubyfloat.Format(f) }

// Latency returns how long the job has waited: now - (enqueued_at ||
// created_at), or 0 when neither is set (Sidekiq's calculate_latency).
func Latency(j *wire.Job, now time.Time) time.Duration {
	t, ok := j.Time("enqueued_at")
	if !ok {
		if t, ok = j.Time("created_at"); !ok {
			return 0
		}
	}
	return now.Sub(t)
}
