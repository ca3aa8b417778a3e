package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
	"github.com/gojob/gojob/sidekiq/wire"
	"github.com/gomodule/redigo/redis"
)

// Stats is the dashboard summary (Ruby's Sidekiq::Stats after
// fetch_stats!).
type Stats struct {
	// Processed and Failed are the all-time counters stat:processed and
	// stat:failed.
	Processed, Failed int64
	// Scheduled, Retries and Dead are the sizes of the schedule, retry and
	// dead sets.
	Scheduled, Retries, Dead int64
	// Processes is SCARD processes (Ruby's ProcessSet#size; it may count
	// dead processes until a cleanup, see API.Processes).
	Processes int64
	// Busy is the sum of the processes' busy fields (Ruby's workers_size
	// and WorkSet#size).
	Busy int64
	// Enqueued is the sum of the lengths of the queues in the queues set.
	Enqueued int64
	// DefaultQueueLatency is the age of the oldest job in queue:default,
	// from its enqueued_at or else created_at read by lexical type (0 when
	// the queue is empty or its tail is not a JSON object).
	DefaultQueueLatency time.Duration
	// Queues holds every queue of the queues set with its length, largest
	// first, then by name (Ruby's Stats#queues).
	Queues []QueueSize
}

// QueueSize is a queue name with its length.
type QueueSize struct {
	Name string
	Size int64
}

// Stats reads the dashboard numbers in two pipelined round trips (plus more
// SSCAN pages for very large processes/queues sets): the fast part (GET
// stat:processed, GET stat:failed, ZCARD schedule/retry/dead, SCARD
// processes, LINDEX queue:default -1) together with the first SSCAN pages,
// then HGET <id> busy for every process and LLEN for every queue.
func (a *API) Stats(ctx context.Context) (*Stats, error) {
	conn, err := a.conn(ctx, "stats")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.Send("GET", contract.KeyStatProcessed)
	conn.Send("GET", contract.KeyStatFailed)
	conn.Send("ZCARD", contract.KeySchedule)
	conn.Send("ZCARD", contract.KeyRetry)
	conn.Send("ZCARD", contract.KeyDead)
	conn.Send("SCARD", contract.KeyProcesses)
	conn.Send("LINDEX", contract.QueueKey("default"), -1)
	conn.Send("SSCAN", contract.KeyProcesses, "0", "COUNT", 1000)
	conn.Send("SSCAN", contract.KeyQueues, "0", "COUNT", 1000)
	if err := conn.Flush(); err != nil {
		return nil, fmt.Errorf("sidekiq: stats: %w", err)
	}
	replies := make([]any, 9)
	for i := range replies {
		r, err := redis.ReceiveContext(conn, ctx)
		if err != nil {
			return nil, fmt.Errorf("sidekiq: stats: %w", err)
		}
		replies[i] = r
	}
	st := &Stats{}
	st.Processed = contract.RubyToI(redisx.OptString(replies[0]))
	st.Failed = contract.RubyToI(redisx.OptString(replies[1]))
	ints := []*int64{&st.Scheduled, &st.Retries, &st.Dead, &st.Processes}
	for i, p := range ints {
		if *p, err = redis.Int64(replies[2+i], nil); err != nil {
			return nil, fmt.Errorf("sidekiq: stats: %w", err)
		}
	}
	if tail, ok := replies[6].([]byte); ok {
		if job, perr := wire.ParseJob(tail); perr == nil {
			st.DefaultQueueLatency = contract.Latency(job, a.clock.Now())
		}
	}
	procs, err := redisx.SScanContinue(ctx, conn, contract.KeyProcesses, replies[7])
	if err != nil {
		return nil, fmt.Errorf("sidekiq: stats: %w", err)
	}
	queues, err := redisx.SScanContinue(ctx, conn, contract.KeyQueues, replies[8])
	if err != nil {
		return nil, fmt.Errorf("sidekiq: stats: %w", err)
	}
	if len(procs)+len(queues) == 0 {
		return st, nil
	}
	for _, p := range procs {
		conn.Send("HGET", p, "busy")
	}
	for _, q := range queues {
		conn.Send("LLEN", contract.QueueKey(q))
	}
	if err := conn.Flush(); err != nil {
		return nil, fmt.Errorf("sidekiq: stats: %w", err)
	}
	for range procs {
		r, err := redis.ReceiveContext(conn, ctx)
		if err != nil {
			return nil, fmt.Errorf("sidekiq: stats: %w", err)
		}
		st.Busy += contract.RubyToI(redisx.OptString(r))
	}
	for _, q := range queues {
		n, err := redis.Int64(redis.ReceiveContext(conn, ctx))
		if err != nil {
			return nil, fmt.Errorf("sidekiq: stats: %w", err)
		}
		st.Enqueued += n
		st.Queues = append(st.Queues, QueueSize{Name: q, Size: n})
	}
	slices.SortFunc(st.Queues, func(x, y QueueSize) int {
		return cmp.Or(cmp.Compare(y.Size, x.Size), cmp.Compare(x.Name, y.Name))
	})
	return st, nil
}

// DayStats is one day's counters (0 when the key is missing).
type DayStats struct {
	// Date is "YYYY-MM-DD" (UTC).
	Date              string
	Processed, Failed int64
}

// History reads the daily processed/failed counters of the last days days
// (1 to 1825, 5×365; 0 means 30, the dashboard's default), today (UTC)
// first, as Ruby's Stats::History does (MGET of stat:processed:<date> and
// stat:failed:<date>), both MGETs in one pipelined round trip.
func (a *API) History(ctx context.Context, days int) ([]DayStats, error) {
	if days == 0 {
		days = 30
	}
	if days < 1 || days > 5*365 {
		return nil, fmt.Errorf("sidekiq: history: days must be between 1 and %d, got %d", 5*365, days)
	}
	start := a.clock.Now().UTC()
	day := time.Date(start.Year(), start.Month(), start.Day(), 0, 0, 0, 0, time.UTC)
	h := make([]DayStats, days)
	procKeys := make([]any, days)
	failKeys := make([]any, days)
	for i := range days {
		d := day.AddDate(0, 0, -i).Format("2006-01-02")
		h[i].Date = d
		procKeys[i] = contract.DailyStatKey("processed", d)
		failKeys[i] = contract.DailyStatKey("failed", d)
	}
	conn, err := a.conn(ctx, "history")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.Send("MGET", procKeys...)
	conn.Send("MGET", failKeys...)
	if err := conn.Flush(); err != nil {
		return nil, fmt.Errorf("sidekiq: history: %w", err)
	}
	for k := range 2 {
		vals, err := redis.Values(redis.ReceiveContext(conn, ctx))
		if err != nil {
			return nil, fmt.Errorf("sidekiq: history: %w", err)
		}
		for i, v := range vals {
			n := contract.RubyToI(redisx.OptString(v))
			if k == 0 {
				h[i].Processed = n
			} else {
				h[i].Failed = n
			}
		}
	}
	return h, nil
}

// ResetStats sets the all-time counters named by stats ("processed",
// "failed"; none means both) to 0 with one MSET, as Ruby's Stats#reset
// (daily counters are kept). It returns the counters reset, in Ruby's
// order. Unknown names are ignored; when no name is known it returns an
// error.
func (a *API) ResetStats(ctx context.Context, stats ...string) ([]string, error) {
	all := []string{"failed", "processed"}
	chosen := all
	if len(stats) > 0 {
		chosen = nil
		for _, s := range all {
			if slices.Contains(stats, s) {
				chosen = append(chosen, s)
			}
		}
		if len(chosen) == 0 {
			return nil, errors.New(`sidekiq: reset stats: no known stat (want "processed" or "failed")`)
		}
	}
	args := make([]any, 0, 2*len(chosen))
	for _, s := range chosen {
		args = append(args, "stat:"+s, 0)
	}
	conn, err := a.conn(ctx, "reset stats")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if _, err := redis.DoContext(conn, ctx, "MSET", args...); err != nil {
		return nil, fmt.Errorf("sidekiq: reset stats: %w", err)
	}
	return chosen, nil
}
