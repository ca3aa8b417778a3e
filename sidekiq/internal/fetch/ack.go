package fetch

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// acker takes finished jobs out of their in-progress lists: one LREM per
// job, pipelined in batches on pooled connections. An acknowledgement never
// waits behind a blocked fetch, so a job that has finished stays in flight
// (and would run again if the process died) for about one round trip.
//
// With hold > 0 (the batched fetch) the acker leaves queued
// acknowledgements for up to hold to the fetchers, which send them in their
// next take's write (steal): one round trip instead of two. What no take
// picks up within hold, the acker sends itself, so an empty queue (a fetch
// blocked in BLMOVE) delays an acknowledgement by hold at most.
type acker struct {
	cfg  *Config
	life *reliableLife
	hold time.Duration

	mu     sync.Mutex
	queued []Unit
	since  int64 // when the oldest queued acknowledgement was added (unix ns)
	closed bool
	kick   chan struct{} // capacity 1: something was queued, or close
	done   sync.WaitGroup

	// timer is run's wait for the hold (nil until first needed).
	timer *time.Timer

	// busySince is when the batch being sent was taken from the queue (unix
	// nanoseconds; 0 when idle): its jobs are finished, not orphans, until
	// the send ends (the own-list sweep asks).
	busySince atomic.Int64
}

// ackBatch is the most acknowledgements one write carries.
const ackBatch = 256

func newAcker(cfg *Config, life *reliableLife) *acker {
	return &acker{cfg: cfg, life: life, kick: make(chan struct{}, 1)}
}

// start runs the acknowledgements until close.
func (a *acker) start() {
	a.done.Add(1)
	go a.run()
}

// add queues the acknowledgement of u; after close it is sent at once.
// Slots hold at most one job each, so the queue holds at most one
// acknowledgement per slot that has not been sent.
func (a *acker) add(u Unit) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return a.send([]Unit{u})
	}
	if len(a.queued) == 0 {
		a.since = time.Now().UnixNano()
	}
	a.queued = append(a.queued, u)
	first := len(a.queued) == 1
	a.mu.Unlock()
	if first {
		a.wake()
	}
	return nil
}

// addMany queues the acknowledgements of units together, waking the
// acker once: the successes a middleware released at once (sidekiq's
// ReleaseAcks) go out in one write rather than in the first few the
// acker happened to take while the rest were being added.
func (a *acker) addMany(units []Unit) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return a.send(units)
	}
	first := len(a.queued) == 0
	if first {
		a.since = time.Now().UnixNano()
	}
	a.queued = append(a.queued, units...)
	a.mu.Unlock()
	if first {
		a.wake()
	}
	return nil
}

func (a *acker) wake() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// close ends the acknowledgements once those queued are sent.
func (a *acker) close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.wake()
	a.done.Wait()
}

// waitingSince returns since when an acknowledgement has been queued or on
// its way (0: none).
func (a *acker) waitingSince() int64 {
	a.mu.Lock()
	since := a.since
	if len(a.queued) == 0 {
		since = 0
	}
	a.mu.Unlock()
	return earliest(since, a.busySince.Load())
}

// earliest returns the earlier of two unix-nanosecond times, where 0 means
// none.
func earliest(a, b int64) int64 {
	if b != 0 && (a == 0 || b < a) {
		return b
	}
	return a
}

// take removes up to max queued acknowledgements and appends them to buf.
func (a *acker) take(buf []Unit, max int) []Unit {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.takeLocked(buf, max)
}

func (a *acker) takeLocked(buf []Unit, max int) []Unit {
	n := min(max, len(a.queued))
	buf = append(buf, a.queued[:n]...)
	rest := copy(a.queued, a.queued[n:])
	clear(a.queued[rest:])
	a.queued = a.queued[:rest]
	// With some left, since stays that of the oldest taken: earlier than
	// theirs, which only makes the own-list sweep wait longer.
	return buf
}

// steal takes up to max queued acknowledgements for a fetcher that sends
// them in its take's write, and moves the fetcher's waiting time (taking,
// unix ns) back to when they were queued, in the same critical section, so
// that the own-list sweep never sees them neither here nor there. The
// caller sends them or gives them back with resend.
func (a *acker) steal(buf []Unit, max int, taking *atomic.Int64) []Unit {
	if a.hold == 0 {
		return buf
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.queued) > 0 {
		if w := taking.Load(); w == 0 || a.since < w {
			taking.Store(a.since)
		}
	}
	return a.takeLocked(buf, max)
}

// resend sends acknowledgements whose stolen send's connection broke before
// their replies were read. That send may have taken the jobs out already,
// so finding them gone is no sign of another process's recovery.
func (a *acker) resend(units []Unit) {
	for i := range units {
		units[i].resent = true
	}
	a.send(units)
}

// checked reads one LREM reply of an acknowledgement.
func (a *acker) checked(u Unit, reply any) {
	if n, err := redis.Int(reply, nil); err == nil && n == 0 && !u.resent {
		a.life.notOwned(u.list, u.Raw)
	}
}

func (a *acker) run() {
	defer a.done.Done()
	batch := make([]Unit, 0, ackBatch)
	for range a.kick {
		if a.hold > 0 && !a.waitHold() {
			continue // the fetchers took them all; the next add kicks
		}
		for {
			batch = a.take(batch[:0], ackBatch)
			if len(batch) == 0 {
				break
			}
			a.busySince.Store(time.Now().UnixNano())
			a.send(batch)
			a.busySince.Store(0)
			clear(batch)
		}
		a.mu.Lock()
		closed, empty := a.closed, len(a.queued) == 0
		a.mu.Unlock()
		if closed && empty {
			return
		}
	}
}

// waitHold waits until the oldest queued acknowledgement has been left to
// the fetchers for hold, and reports whether there is anything to send
// (or the acker is closing). The fetchers steal while it waits, and the
// oldest left after a steal is younger than the one it began waiting
// for: it waits again for that one, rather than sending acknowledgements
// queued a moment ago that the next take would have carried (measured:
// 28% of a batched drain's round trips were the acker's, 2.7 jobs each).
func (a *acker) waitHold() bool {
	for {
		a.mu.Lock()
		wait := a.since + int64(a.hold) - time.Now().UnixNano()
		closed, empty := a.closed, len(a.queued) == 0
		a.mu.Unlock()
		switch {
		case closed:
			return true
		case empty:
			return false
		case wait <= 0:
			return true
		}
		if a.timer == nil {
			a.timer = time.NewTimer(time.Duration(wait))
		} else {
			a.timer.Reset(time.Duration(wait))
		}
		<-a.timer.C
	}
}

// send sends the LREMs of units in one pipeline, through an outage.
func (a *acker) send(units []Unit) error {
	var replies []any
	err := a.cfg.Writes.Do(func(conn redis.Conn) error {
		lrem := make([]any, 3) // reused: Send writes it out before it returns
		lrem[1] = -1
		for _, u := range units {
			lrem[0], lrem[2] = u.list, u.Raw
			conn.Send("LREM", lrem...)
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
