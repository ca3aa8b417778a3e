package wire

import (
	"fmt"
	"math"
	"time"

	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// The per-job limits of docs/heartbeats.md, Ocypod's two timeouts: a job
// that runs longer than "timeout" seconds, or goes "heartbeat_timeout"
// seconds without a heartbeat, is cancelled and fails. Ruby Sidekiq (6.x to
// 8.x) reads neither key and keeps both, as it keeps every unknown key.
const (
	keyTimeout          = "timeout"
	keyHeartbeatTimeout = "heartbeat_timeout"
)

// maxLimitSeconds bounds the limits (about 31 years), so that a duration
// never overflows.
const maxLimitSeconds = 1e9

// Timeout returns the job's "timeout" (0 when absent or null) or an error
// for a value that is not a positive number of seconds.
func (j *Job) Timeout() (time.Duration, error) { return j.limit(keyTimeout) }

// HeartbeatTimeout returns the job's "heartbeat_timeout" (0 when absent or
// null) or an error for a value that is not a positive number of seconds.
func (j *Job) HeartbeatTimeout() (time.Duration, error) { return j.limit(keyHeartbeatTimeout) }

// SetTimeout sets "timeout" in seconds (a float for sub-second values).
func (j *Job) SetTimeout(d time.Duration) error { return j.setLimit(keyTimeout, d) }

// SetHeartbeatTimeout sets "heartbeat_timeout" in seconds.
func (j *Job) SetHeartbeatTimeout(d time.Duration) error { return j.setLimit(keyHeartbeatTimeout, d) }

func (j *Job) limit(key string) (time.Duration, error) {
	v, ok := j.Get(key)
	if !ok || v.IsNull() {
		return 0, nil
	}
	return limitSeconds(key, v)
}

// limitSeconds reads a limit value: a JSON number of seconds, greater than
// zero and at most 1e9.
func limitSeconds(key string, v rubyjson.Value) (time.Duration, error) {
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

func (j *Job) setLimit(key string, d time.Duration) error {
	if d <= 0 || d.Seconds() > maxLimitSeconds {
		return fmt.Errorf("sidekiq: %s must be greater than 0 and at most 1e9 s, got %s", key, d)
	}
	if d%time.Second == 0 {
		j.Set(key, rubyjson.IntValue(int64(d/time.Second)))
	} else {
		j.Set(key, rubyjson.FloatValue(d.Seconds()))
	}
	return nil
}
