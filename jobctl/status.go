package jobctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
)

// Status is what a job reported about itself, kept in the hash
// gojob-status:<jid> for a day after its last write (docs/job-control.md).
// Its fields are the hash's fields: progress (a number, 0 to 1), message,
// result (JSON), outcome and updated_at (epoch seconds).
type Status struct {
	// JID is the job.
	JID string `json:"jid"`
	// Progress is the fraction done, nil when never reported.
	Progress *float64 `json:"progress,omitempty"`
	// Message is the last progress message.
	Message string `json:"message,omitempty"`
	// Result is the job's result, a JSON value, nil when none.
	Result json.RawMessage `json:"result,omitempty"`
	// Outcome is how the job ended when it said so itself or was
	// cancelled: "success", "failed", "discard", "snooze", "retry_in",
	// "cancelled"; "" while it runs.
	Outcome string `json:"outcome,omitempty"`
	// UpdatedAt is the time of the last write.
	UpdatedAt time.Time `json:"updated_at"`
}

// WriteStatus writes the set fields of st (JID and UpdatedAt are ignored;
// a nil Progress, an empty Message, Result or Outcome are left as they
// are) to the job's status hash at now, and renews its day.
func WriteStatus(ctx context.Context, pool *redis.Pool, jid string, st *Status, now time.Time) error {
	if jid == "" {
		return errors.New("jobctl: write status: jid is required")
	}
	args := []any{contract.StatusKey(jid), "updated_at", strconv.FormatFloat(contract.EpochSeconds(now), 'f', -1, 64)}
	if st.Progress != nil {
		args = append(args, "progress", strconv.FormatFloat(*st.Progress, 'f', -1, 64))
	}
	if st.Message != "" {
		args = append(args, "message", st.Message)
	}
	if len(st.Result) > 0 {
		if !json.Valid(st.Result) {
			return fmt.Errorf("jobctl: write status of %s: result is not JSON", jid)
		}
		args = append(args, "result", []byte(st.Result))
	}
	if st.Outcome != "" {
		args = append(args, "outcome", st.Outcome)
	}
	conn, err := pool.GetContext(ctx)
	if err != nil {
		return fmt.Errorf("jobctl: write status of %s: %w", jid, err)
	}
	defer conn.Close()
	conn.Send("MULTI")
	conn.Send("HSET", args...)
	conn.Send("EXPIRE", contract.StatusKey(jid), contract.StatusTTL)
	if _, err := redis.DoContext(conn, ctx, "EXEC"); err != nil {
		return fmt.Errorf("jobctl: write status of %s: %w", jid, err)
	}
	return nil
}

// ReadStatus reads the job's status; it returns nil, nil when the job has
// none.
func ReadStatus(ctx context.Context, pool *redis.Pool, jid string) (*Status, error) {
	conn, err := pool.GetContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("jobctl: read status of %s: %w", jid, err)
	}
	defer conn.Close()
	m, err := redis.StringMap(redis.DoContext(conn, ctx, "HGETALL", contract.StatusKey(jid)))
	if err != nil {
		return nil, fmt.Errorf("jobctl: read status of %s: %w", jid, err)
	}
	if len(m) == 0 {
		return nil, nil
	}
	st := &Status{JID: jid, Message: m["message"], Outcome: m["outcome"]}
	if v, ok := m["progress"]; ok {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			st.Progress = &f
		}
	}
	if v := m["result"]; v != "" && json.Valid([]byte(v)) {
		st.Result = json.RawMessage(v)
	}
	if f, err := strconv.ParseFloat(m["updated_at"], 64); err == nil {
		st.UpdatedAt = contract.FromEpochSeconds(f)
	}
	return st, nil
}
