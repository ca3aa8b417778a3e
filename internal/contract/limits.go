package contract

import (
	"time"

	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// The per-job limits of docs/heartbeats.md, Ocypod's two timeouts, read by
// wire.Job's Timeout and HeartbeatTimeout.
const (
	KeyTimeout          = "timeout"
	KeyHeartbeatTimeout = "heartbeat_timeout"
)

// LimitSeconds checks v as the value of the limit key (KeyTimeout or
// KeyHeartbeatTimeout) of a job: a JSON number of seconds, greater than
// zero and at most 1e9, or null for no limit (0).
func LimitSeconds(key string, v rubyjson.Value) (time.Duration, error) {
	j := wire.JobFromMap(rubyjson.NewMap())
	j.Set(key, v)
	if key == KeyHeartbeatTimeout {
		return j.HeartbeatTimeout()
	}
	return j.Timeout()
}
