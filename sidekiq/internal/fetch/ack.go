package fetch

import (
	_ "embed"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

var (
	//go:embed lua/reliable_ack.lua
	ackSrc    string
	ackScript = redis.NewScript(-1, ackSrc)
)

// acker takes finished jobs out of their in-progress lists: one LREM per
// job, pipelined in batches on pooled connections, or one script call per
// batch (script: the batched fetch, whose batches are large). An acknowledgement never
// waits behind a blocked fetch, so a job that has finished stays in flight
// (and would run again if the process died) for one round trip.
type acker struct {
	cfg    *Config
	life   *reliableLife
	script bool
	in     chan Unit
	done   sync.WaitGroup

	// closeMu orders sends on in against its close: senders hold it for
	// reading.
	closeMu sync.RWMutex
	closed  bool

	// busySince is when the batch being sent was taken from in (unix
	// nanoseconds; 0 when idle): its jobs are finished, not orphans, until
	// the send ends (the own-list sweep asks).
	busySince atomic.Int64
}

func newAcker(cfg *Config, life *reliableLife, n int) *acker {
	return &acker{cfg: cfg, life: life, in: make(chan Unit, 4*n)}
}

// start runs the acknowledgements until close.
func (a *acker) start() {
	a.done.Add(1)
	go a.run()
}

// add queues the acknowledgement of u; after close it is sent at once.
func (a *acker) add(u Unit) error {
	a.closeMu.RLock()
	defer a.closeMu.RUnlock()
	if a.closed {
		return a.send([]Unit{u})
	}
	a.in <- u
	return nil
}

// close ends the acknowledgements once those queued are sent.
func (a *acker) close() {
	a.closeMu.Lock()
	if !a.closed {
		a.closed = true
		close(a.in)
	}
	a.closeMu.Unlock()
	a.done.Wait()
}

// waitingSince returns since when a batch has been on its way (0: none),
// or now while jobs wait in the channel.
func (a *acker) waitingSince() int64 {
	if len(a.in) > 0 {
		return time.Now().UnixNano()
	}
	return a.busySince.Load()
}

// checked reads one LREM reply of an acknowledgement.
func (a *acker) checked(u Unit, reply any) {
	if n, err := redis.Int(reply, nil); err == nil && n == 0 {
		a.life.notOwned(u.list, u.Raw)
	}
}

func (a *acker) run() {
	defer a.done.Done()
	batch := make([]Unit, 0, 256)
	for u := range a.in {
		a.busySince.Store(time.Now().UnixNano())
		batch = append(batch[:0], u)
		// Let the slots that are finishing their jobs join this batch:
		// fewer, fuller writes.
		runtime.Gosched()
	more:
		for len(batch) < cap(batch) {
			select {
			case u, ok := <-a.in:
				if !ok {
					break more
				}
				batch = append(batch, u)
			default:
				break more
			}
		}
		a.send(batch)
		a.busySince.Store(0)
		clear(batch)
	}
}

// send sends the LREMs of units in one pipeline (or one script call),
// through an outage.
func (a *acker) send(units []Unit) error {
	if a.script {
		return a.sendScript(units)
	}
	var replies []any
	err := a.cfg.Writes.Do(func(conn redis.Conn) error {
		for _, u := range units {
			conn.Send("LREM", u.list, -1, u.Raw)
		}
		var err error
		replies, err = redis.Values(conn.Do(""))
		return err
	})
	if err != nil {
		a.cfg.Logger.Error().Err(err).Str("component", "fetch").Int("jobs", len(units)).
			Msg("could not acknowledge finished jobs; they stay in the in-progress list and run again if this process dies")
		return err
	}
	for i, r := range replies {
		if i < len(units) {
			a.checked(units[i], r)
		}
	}
	return nil
}

// ackArgs returns the EVALSHA arguments of the ack script for units.
func ackArgs(units []Unit) []any {
	var keys []any
	index := map[string]int{}
	args := make([]any, 0, 2*len(units))
	for _, u := range units {
		i, ok := index[u.list]
		if !ok {
			keys = append(keys, u.list)
			i = len(keys)
			index[u.list] = i
		}
		args = append(args, i, u.Raw)
	}
	out := make([]any, 0, 2+len(keys)+len(args))
	out = append(out, ackScript.Hash(), len(keys))
	out = append(out, keys...)
	return append(out, args...)
}

// acked reads the ack script's reply for units.
func (a *acker) acked(units []Unit, reply any, err error) error {
	missing, err := redis.Ints(reply, err)
	if err != nil {
		return err
	}
	for _, i := range missing {
		if i >= 1 && i <= len(units) {
			a.life.notOwned(units[i-1].list, units[i-1].Raw)
		}
	}
	return nil
}

// sendScript acknowledges units with one call of the ack script.
func (a *acker) sendScript(units []Unit) error {
	args := ackArgs(units)
	err := a.cfg.Writes.Do(func(conn redis.Conn) error {
		reply, err := conn.Do("EVALSHA", args...)
		var re redis.Error
		if errors.As(err, &re) && strings.HasPrefix(string(re), "NOSCRIPT") {
			if err := ackScript.Load(conn); err != nil {
				return err
			}
			reply, err = conn.Do("EVALSHA", args...)
		}
		return a.acked(units, reply, err)
	})
	if err != nil {
		a.cfg.Logger.Error().Err(err).Str("component", "fetch").Int("jobs", len(units)).
			Msg("could not acknowledge finished jobs; they stay in the in-progress list and run again if this process dies")
		return err
	}
	return nil
}
