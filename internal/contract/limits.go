package contract

import (
	"fmt"
	"math"
	"time"

	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// The per-job limits of docs/heartbeats.md, Ocypod's two timeouts, written
// by wire.Job's SetTimeout and SetHeartbeatTimeout: a job that runs longer
// than "timeout" seconds, or goes "heartbeat_timeout" seconds without a
// heartbeat, is cancelled and fails.
const (
	KeyTimeout          = "timeout"
	KeyHeartbeatTimeout = "heartbeat_timeout"
)

// maxLimitSeconds bounds the limits (about 31 years), so that a duration
// never overflows; wire.Job's setters refuse more.
const maxLimitSeconds = 1e9

// Timeout returns the job's "timeout" (0 when absent or null) or an error
// for a value that is not a positive number of seconds.
func Timeout(j *wire.Job) (time.Duration, error) { return limit(j, KeyTimeout) }

// HeartbeatTimeout returns the job's "heartbeat_timeout" (0 when absent or
// null) or an error for a value that is not a positive number of seconds.
func HeartbeatTimeout(j *wire.Job) (time.Duration, error) { return limit(j, KeyHeartbeatTimeout) }

func limit(j *wire.Job, key string) (time.Duration, error) {
	v, ok := j.Get(key)
	if !ok {
		return 0, nil
	}
	return LimitSeconds(key, v)
}

// LimitSeconds checks v as the value of the limit key (KeyTimeout or
// KeyHeartbeatTimeout) of a job: a JSON number of seconds, greater than
// zero and at most 1e9, or null for no limit (0).
func LimitSeconds(key string, v rubyjson.Value) (time.Duration, error) {
	if v.Kind() == rubyjson.Null {
		return 0, nil
	}
	f, ok := v.Float()
	if !ok || math.IsNaN(f) || f <= 0 || f > maxLimitSeconds {
		return 0, fmt.Errorf("%s must be a number of seconds, greater than 0 and at most 1e9, got %s", key, v.Encode())
	}
	d := time.Duration(f * float64(time.Second))
	if d <= 0 {
		d = 1 // a positive value below a nanosecond
	}
	return d, nil
}
