package wire

import (
	"fmt"
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

// SetTimeout sets "timeout" in seconds (a float for sub-second values).
func (j *Job) SetTimeout(d time.Duration) error { return j.setLimit(keyTimeout, d) }

// SetHeartbeatTimeout sets "heartbeat_timeout" in seconds.
func (j *Job) SetHeartbeatTimeout(d time.Duration) error { return j.setLimit(keyHeartbeatTimeout, d) }

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
