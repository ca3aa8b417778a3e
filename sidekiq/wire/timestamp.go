package wire

import (
	"math"
	"time"

	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// readTimestamp reads a job timestamp by its JSON lexical type (docs/sidekiq-wire.md#timestamps):
// an integer is epoch milliseconds (8.x), a number with a fraction or an
// exponent is epoch seconds (6.x, 7.x). It returns false for anything else.
func readTimestamp(v rubyjson.Value) (time.Time, bool) {
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
		return fromEpochSeconds(f), true
	}
	return time.Time{}, false
}

// fromEpochSeconds converts float epoch seconds to a time.
func fromEpochSeconds(f float64) time.Time {
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(math.Round(frac*1e9)))
}
