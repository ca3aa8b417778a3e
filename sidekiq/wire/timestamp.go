package wire

import (
	"math"
	"strconv"
	"time"

	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// ReadTimestamp reads a job timestamp by its JSON lexical type (docs/sidekiq-wire.md#timestamps):
// an integer is epoch milliseconds (8.x), a number with a fraction or an
// exponent is epoch seconds (6.x, 7.x). It returns false for anything else.
func ReadTimestamp(v rubyjson.Value) (time.Time, bool) {
	switch v.Kind() {
	case rubyjson.Integer:
		ms, ok := v.Int()
		if !ok {
			return time.Time{}, false
		}
		return time.UnixMilli(ms), true
	case rubyjson.Float:
		f, ok := v.Float()
		if !ok || math.IsInf(f, 0) || math.IsNaN(f) {
			return time.Time{}, false
		}
		return FromEpochSeconds(f), true
	}
	return time.Time{}, false
}

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
func TimestampValue(t time.Time, v Version) rubyjson.Value {
	if v.MillisecondTimestamps() {
		return rubyjson.IntValue(t.UnixMilli())
	}
	return rubyjson.FloatValue(EpochSeconds(t))
}

// Score returns the sorted-set score string of t: float seconds in Ruby's
// Float#to_s form, in every version.
func Score(t time.Time) string { return rubyjson.FormatFloat(EpochSeconds(t)) }

// ParseScore parses a score as Redis returns it.
func ParseScore(s string) (float64, error) { return strconv.ParseFloat(s, 64) }

// FormatScore writes a score as Ruby's Float#to_s; Redis reads it back as
// the same double.
func FormatScore(f float64) string { return rubyjson.FormatFloat(f) }
