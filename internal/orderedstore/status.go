package orderedstore

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// QueueStatus is what the admin commands and the dashboard show of an
// ordered queue.
type QueueStatus struct {
	Queue  string `json:"queue"`
	Shards int    `json:"shards"`
	// Pending payloads wait in the queue; Processing ones are in batches
	// being worked; Morgue ones were buried (MorgueKeys keys).
	Pending    int64 `json:"pending"`
	Processing int64 `json:"processing"`
	Morgue     int64 `json:"morgue"`
	MorgueKeys int   `json:"morgue_keys"`
	Processed  int64 `json:"processed"`
	Failed     int64 `json:"failed"`
	// Lag is how overdue the most overdue key is (Lowkiq's lag: now minus
	// its perform_in; 0 when nothing is due).
	Lag      time.Duration `json:"lag_ns"`
	Members  []string      `json:"members"`
	ShardSet []ShardStatus `json:"shard_status"`
}

// ShardStatus is one shard of a queue.
type ShardStatus struct {
	Shard int    `json:"shard"`
	Owner string `json:"owner,omitempty"`
	Token int64  `json:"token,omitempty"`
	// LeaseTTL is what is left of the owner's lease.
	LeaseTTL time.Duration `json:"lease_ttl_ns"`
	Keys     int           `json:"keys"`
	Busy     bool          `json:"busy"`
	Lag      time.Duration `json:"lag_ns"`
}

// ErrNoQueue is returned for a queue that does not exist.
var ErrNoQueue = errors.New("ordered: no such queue")

// Queues lists the ordered queues.
func Queues(ctx context.Context, pool *redis.Pool) ([]string, error) {
	conn, err := pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	qs, err := redis.Strings(redis.DoContext(conn, ctx, "SMEMBERS", KeyQueues))
	slices.Sort(qs)
	return qs, err
}

// Status reads the status of queue q in one pipelined round trip.
func Status(ctx context.Context, pool *redis.Pool, q string, now time.Time) (*QueueStatus, error) {
	if err := ValidQueue(q); err != nil {
		return nil, err
	}
	conn, err := pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	k := KeysOf(q)
	shards, err := QueueShards(ctx, conn, q)
	if err != nil {
		return nil, err
	}
	if shards == 0 {
		return nil, errors.Join(ErrNoQueue, errors.New(q))
	}
	nowMS := now.UnixMilli()
	conn.Send("HGETALL", k.Stats())
	conn.Send("ZCARD", k.Morgue())
	conn.Send("ZRANGEBYSCORE", k.Members(), nowMS, "+inf")
	for s := 0; s < shards; s++ {
		conn.Send("GET", k.Lease(s))
		conn.Send("PTTL", k.Lease(s))
		conn.Send("ZCARD", k.Shard(s))
		conn.Send("EXISTS", k.Proc(s))
		conn.Send("ZRANGE", k.Shard(s), 0, 0, "WITHSCORES")
	}
	if err := conn.Flush(); err != nil {
		return nil, err
	}
	st := &QueueStatus{Queue: q, Shards: shards}
	stats, err := redis.Int64Map(conn.Receive())
	if err != nil {
		return nil, err
	}
	st.Pending, st.Processing, st.Morgue = stats["pending"], stats["processing"], stats["morgue"]
	st.Processed, st.Failed = stats["processed"], stats["failed"]
	if st.MorgueKeys, err = redis.Int(conn.Receive()); err != nil {
		return nil, err
	}
	if st.Members, err = redis.Strings(conn.Receive()); err != nil {
		return nil, err
	}
	for s := 0; s < shards; s++ {
		ss := ShardStatus{Shard: s}
		lease, err := redis.String(conn.Receive())
		if err != nil && !errors.Is(err, redis.ErrNil) {
			return nil, err
		}
		if i := strings.LastIndexByte(lease, ':'); i > 0 {
			ss.Owner = lease[:i]
			ss.Token, _ = strconv.ParseInt(lease[i+1:], 10, 64)
		}
		ttl, _ := redis.Int64(conn.Receive())
		ss.LeaseTTL = time.Duration(max(ttl, 0)) * time.Millisecond
		ss.Keys, _ = redis.Int(conn.Receive())
		ss.Busy, _ = redis.Bool(conn.Receive())
		first, err := redis.Strings(conn.Receive())
		if err != nil {
			return nil, err
		}
		if len(first) == 2 {
			if at, err := strconv.ParseFloat(first[1], 64); err == nil && int64(at) < nowMS {
				ss.Lag = time.Duration(nowMS-int64(at)) * time.Millisecond
			}
		}
		st.Lag = max(st.Lag, ss.Lag)
		st.ShardSet = append(st.ShardSet, ss)
	}
	return st, nil
}

// KeyState is what a queue holds for one ordering key.
type KeyState struct {
	Key   string `json:"key"`
	Shard int    `json:"shard"`
	// Queued reports whether the key waits in its shard; RetryCount and
	// PerformIn are its Lowkiq state then.
	Queued     bool          `json:"queued"`
	RetryCount int           `json:"retry_count"`
	PerformIn  time.Time     `json:"perform_in"`
	Error      string        `json:"error,omitempty"`
	Payloads   []ScoredEntry `json:"payloads"`
	// Morgue holds the key's buried payloads.
	Morgue      []ScoredEntry `json:"morgue,omitempty"`
	MorgueError string        `json:"morgue_error,omitempty"`
	MorgueAt    time.Time     `json:"morgue_at,omitzero"`
}

// ScoredEntry is a payload with its score.
type ScoredEntry struct {
	Payload string  `json:"payload"`
	Score   float64 `json:"score"`
}

// Key reads the state of ordering key key of queue q (pending payloads,
// not those of a batch in flight).
func Key(ctx context.Context, pool *redis.Pool, q, key string) (*KeyState, error) {
	conn, err := pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	shards, err := QueueShards(ctx, conn, q)
	if err != nil {
		return nil, err
	}
	if shards == 0 {
		return nil, errors.Join(ErrNoQueue, errors.New(q))
	}
	k := KeysOf(q)
	ks := &KeyState{Key: key, Shard: ShardOf(key, shards), RetryCount: -1}
	conn.Send("ZSCORE", k.Shard(ks.Shard), key)
	conn.Send("HGET", k.Retries(), key)
	conn.Send("HGET", k.Errors(), key)
	conn.Send("ZRANGE", k.Payloads(key), 0, -1, "WITHSCORES")
	conn.Send("ZRANGE", k.MorguePayloads(key), 0, -1, "WITHSCORES")
	conn.Send("HGET", k.MorgueErrors(), key)
	conn.Send("ZSCORE", k.Morgue(), key)
	if err := conn.Flush(); err != nil {
		return nil, err
	}
	if at, err := redis.Float64(conn.Receive()); err == nil {
		ks.Queued, ks.PerformIn = true, time.UnixMilli(int64(at))
	}
	if rc, err := redis.Int(conn.Receive()); err == nil {
		ks.RetryCount = rc
	}
	ks.Error, _ = redis.String(conn.Receive())
	if ks.Payloads, err = scored(conn.Receive()); err != nil {
		return nil, err
	}
	if ks.Morgue, err = scored(conn.Receive()); err != nil {
		return nil, err
	}
	ks.MorgueError, _ = redis.String(conn.Receive())
	if at, err := redis.Float64(conn.Receive()); err == nil {
		ks.MorgueAt = time.UnixMilli(int64(at))
	}
	return ks, nil
}

func scored(reply any, err error) ([]ScoredEntry, error) {
	vals, err := redis.Strings(reply, err)
	if err != nil {
		return nil, err
	}
	out := []ScoredEntry{}
	for i := 0; i+1 < len(vals); i += 2 {
		f, _ := strconv.ParseFloat(vals[i+1], 64)
		out = append(out, ScoredEntry{Payload: vals[i], Score: f})
	}
	return out, nil
}

// MorgueEntry is a key with buried payloads.
type MorgueEntry struct {
	Key      string    `json:"key"`
	Payloads int       `json:"payloads"`
	Error    string    `json:"error"`
	At       time.Time `json:"at"`
}

// MorgueParams pages the morgue, newest first.
type MorgueParams struct {
	Offset, Limit int
}

// Morgue lists the keys of queue q's morgue, newest burial first.
func Morgue(ctx context.Context, pool *redis.Pool, q string, p *MorgueParams) ([]MorgueEntry, error) {
	if p == nil {
		p = &MorgueParams{}
	}
	conn, err := pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	k := KeysOf(q)
	limit := p.Limit
	if limit <= 0 {
		limit = 25
	}
	vals, err := redis.Strings(redis.DoContext(conn, ctx, "ZREVRANGE", k.Morgue(), p.Offset, p.Offset+limit-1, "WITHSCORES"))
	if err != nil {
		return nil, err
	}
	out := []MorgueEntry{}
	for i := 0; i+1 < len(vals); i += 2 {
		f, _ := strconv.ParseFloat(vals[i+1], 64)
		out = append(out, MorgueEntry{Key: vals[i], At: time.UnixMilli(int64(f))})
		conn.Send("ZCARD", k.MorguePayloads(vals[i]))
		conn.Send("HGET", k.MorgueErrors(), vals[i])
	}
	if err := conn.Flush(); err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Payloads, _ = redis.Int(conn.Receive())
		out[i].Error, _ = redis.String(conn.Receive())
	}
	return out, nil
}

// MorgueAction moves buried payloads back or deletes them.
type MorgueAction string

// Morgue actions.
const (
	MorgueRequeue MorgueAction = "requeue"
	MorgueDelete  MorgueAction = "delete"
)

// MorgueApply requeues or deletes the buried payloads of keys (all the
// morgue's keys when keys is empty) and returns how many payloads it
// moved. Requeued payloads merge with what their key has queued and the
// key gets retry_count -1 and perform_in now.
func MorgueApply(ctx context.Context, pool *redis.Pool, q string, action MorgueAction, keys []string, now time.Time) (int, error) {
	if action != MorgueRequeue && action != MorgueDelete {
		return 0, errors.New("ordered: morgue action must be requeue or delete")
	}
	conn, err := pool.GetContext(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	shards, err := QueueShards(ctx, conn, q)
	if err != nil {
		return 0, err
	}
	if shards == 0 {
		return 0, errors.Join(ErrNoQueue, errors.New(q))
	}
	all := len(keys) == 0
	total := 0
	for {
		batch := keys
		if all {
			batch, err = redis.Strings(redis.DoContext(conn, ctx, "ZRANGE", KeysOf(q).Morgue(), 0, 99))
			if err != nil {
				return total, err
			}
			if len(batch) == 0 {
				return total, nil
			}
		}
		args := []any{Prefix(q), string(action), now.UnixMilli()}
		for _, key := range batch {
			args = append(args, key, ShardOf(key, shards))
		}
		n, err := redis.Int(MorgueScript.DoContext(ctx, conn, args...))
		total += n
		if err != nil || !all {
			return total, err
		}
	}
}
