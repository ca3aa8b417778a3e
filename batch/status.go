package batch

import (
	"context"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
)

// Status is a batch as its hash gojob-batch:<bid> holds it
// (docs/batches.md).
type Status struct {
	BID         string `json:"bid"`
	Description string `json:"description,omitempty"`
	OnSuccess   string `json:"on_success,omitempty"`
	OnComplete  string `json:"on_complete,omitempty"`
	Parent      string `json:"parent,omitempty"`
	// Total counts the members: jobs and child batches.
	Total int64 `json:"total"`
	// Pending, Succeeded and Dead count the members by state.
	Pending   int64 `json:"pending"`
	Succeeded int64 `json:"succeeded"`
	Dead      int64 `json:"dead"`
	// Sealed is true once every job was pushed (Seal).
	Sealed    bool      `json:"sealed"`
	CreatedAt time.Time `json:"created_at"`
	// CompleteAt and SuccessAt are when the callbacks were pushed.
	CompleteAt *time.Time `json:"complete_at,omitempty"`
	SuccessAt  *time.Time `json:"success_at,omitempty"`
}

// Status reads a batch; it returns an error wrapping ErrNotFound when the
// batch does not exist (or has expired, 30 days after its success).
func (b *Batches) Status(ctx context.Context, bid string) (*Status, error) {
	conn, err := b.cfg.Client.Pool().GetContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("batch: status of %s: %w", bid, err)
	}
	defer conn.Close()
	m, err := redis.StringMap(redis.DoContext(conn, ctx, "HGETALL", contract.BatchKey(bid)))
	if err != nil {
		return nil, fmt.Errorf("batch: status of %s: %w", bid, err)
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("batch: status of %s: %w", bid, ErrNotFound)
	}
	return statusOf(bid, m), nil
}

func statusOf(bid string, m map[string]string) *Status {
	st := &Status{BID: bid, Description: m["description"], OnSuccess: m["on_success"], OnComplete: m["on_complete"],
		Parent: m["parent"], Total: parseInt(m["total"]), Pending: parseInt(m["pending"]),
		Succeeded: parseInt(m["succeeded"]), Dead: parseInt(m["dead"]), Sealed: m["sealed"] == "1"}
	st.CreatedAt, _ = epoch(m["created_at"])
	if t, ok := epoch(m["complete_at"]); ok {
		st.CompleteAt = &t
	}
	if t, ok := epoch(m["success_at"]); ok {
		st.SuccessAt = &t
	}
	return st
}

func epoch(s string) (time.Time, bool) {
	if s == "" {
		return time.Time{}, false
	}
	f, err := contract.ParseScore(s)
	if err != nil {
		return time.Time{}, false
	}
	return contract.FromEpochSeconds(f), true
}

// List returns a page of batches, newest first: at most limit (25 when
// limit is not positive) after the first offset. Batches whose hash has
// expired are dropped from the list as they are met.
func (b *Batches) List(ctx context.Context, offset, limit int) ([]*Status, error) {
	if limit <= 0 {
		limit = 25
	}
	conn, err := b.cfg.Client.Pool().GetContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("batch: list: %w", err)
	}
	defer conn.Close()
	bids, err := redis.Strings(redis.DoContext(conn, ctx, "ZREVRANGE", contract.KeyBatches, offset, offset+limit-1))
	if err != nil {
		return nil, fmt.Errorf("batch: list: %w", err)
	}
	for _, bid := range bids {
		conn.Send("HGETALL", contract.BatchKey(bid))
	}
	if err := conn.Flush(); err != nil {
		return nil, fmt.Errorf("batch: list: %w", err)
	}
	var out []*Status
	var gone []any
	for _, bid := range bids {
		m, err := redis.StringMap(redis.ReceiveContext(conn, ctx))
		if err != nil {
			return nil, fmt.Errorf("batch: list: %w", err)
		}
		if len(m) == 0 {
			gone = append(gone, bid)
			continue
		}
		out = append(out, statusOf(bid, m))
	}
	if len(gone) > 0 {
		redis.DoContext(conn, ctx, "ZREM", append([]any{contract.KeyBatches}, gone...)...)
	}
	return out, nil
}
