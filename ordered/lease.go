package ordered

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/orderedstore"
)

// beatResult is what one heartbeat changed.
type beatResult struct {
	Held     map[int]string // shard → token, after the beat
	Lost     []int          // shards whose lease was no longer ours
	Restored int            // payloads of dead owners' batches put back
}

// beatLoop renews the leases every LeaseTTL/4 until Stop has seen the
// running batches end. When beats fail for LeaseTTL/2 the worker treats
// every lease as lost (cancels running batches) before another process can
// take them: a lease's TTL runs on Redis's clock from the last renewal
// Redis received, which is later than the beat's start measured here on
// the monotonic clock (real time on purpose: the TTL is real time too).
func (w *worker) beatLoop() {
	defer close(w.beatDone)
	tick := time.NewTicker(w.cfg.LeaseTTL / 4)
	defer tick.Stop()
	for {
		select {
		case <-w.beatQuit:
			return
		case <-tick.C:
		}
		w.beatOnce()
	}
}

func (w *worker) beatOnce() {
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.LeaseTTL/4)
	defer cancel()
	res, err := w.beat(ctx)
	if err != nil {
		w.log.Warn().Err(err).Msg("heartbeat failed")
		w.mu.Lock()
		expired := !w.valid.IsZero() && time.Now().After(w.valid)
		var lost []int
		if expired {
			for s := range w.held {
				lost = append(lost, s)
			}
		}
		w.mu.Unlock()
		if len(lost) > 0 {
			w.dropLost(lost)
		}
		return
	}
	if res.Restored > 0 {
		w.log.Info().Int("payloads", res.Restored).Msg("took over shards of a dead process; its unfinished batches are back in the queue")
	}
}

// beat runs one heartbeat: renew, release above the fair share, lease up
// to it (internal/orderedstore/lua/beat.lua).
func (w *worker) beat(ctx context.Context) (*beatResult, error) {
	start := time.Now()
	w.mu.Lock()
	args := []any{w.keys.Prefix(), w.cfg.Identity, w.cfg.LeaseTTL.Milliseconds(), w.cfg.Clock.Now().UnixMilli(),
		rand.IntN(max(w.shards, 1)), len(w.held)}
	for s, tok := range w.held {
		args = append(args, s, tok)
	}
	for s := range w.running {
		args = append(args, s)
	}
	w.mu.Unlock()
	conn, err := w.cfg.Pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	reply, err := redis.Strings(orderedstore.BeatScript.DoContext(ctx, conn, args...))
	if err != nil {
		return nil, err
	}
	res := &beatResult{Held: map[int]string{}}
	i := 0
	for ; i+1 < len(reply) && reply[i] != "lost"; i += 2 {
		s, err := strconv.Atoi(reply[i])
		if err != nil {
			return nil, fmt.Errorf("ordered: beat: bad reply %q", reply)
		}
		res.Held[s] = reply[i+1]
	}
	for i++; i < len(reply) && reply[i] != "restored"; i++ {
		s, _ := strconv.Atoi(reply[i])
		res.Lost = append(res.Lost, s)
	}
	if i+1 < len(reply) {
		res.Restored, _ = strconv.Atoi(reply[i+1])
	}
	w.dropLost(res.Lost)
	w.mu.Lock()
	for s := range w.held {
		if _, ok := res.Held[s]; !ok {
			delete(w.held, s) // released above the fair share
		}
	}
	for s, tok := range res.Held {
		w.held[s] = tok
	}
	w.valid = start.Add(w.cfg.LeaseTTL / 2)
	w.mu.Unlock()
	return res, nil
}
