package redisx

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
)

// Backoff is an exponential backoff from 100 ms to Max (5 s when zero)
// with jitter. The zero value is ready to use.
type Backoff struct {
	d time.Duration
	// Max is the longest step.
	Max time.Duration
}

// Next returns the next wait: half the current step plus up to half again.
func (b *Backoff) Next() time.Duration {
	top := b.Max
	if top <= 0 {
		top = 5 * time.Second
	}
	if b.d == 0 {
		b.d = min(100*time.Millisecond, top)
	} else {
		b.d = min(b.d*2, top)
	}
	return b.d/2 + rand.N(b.d/2+1)
}

// Reset starts the backoff afresh after a success.
func (b *Backoff) Reset() { b.d = 0 }

// OutageLog logs a Redis outage once when it starts and once when it ends,
// however many goroutines see it. The zero value logs nowhere; set Log.
type OutageLog struct {
	// Log receives the two lines.
	Log *zerolog.Logger
	// Probe, when set, is tried every probeEvery while an outage that a
	// failure began lasts, on a goroutine of its own; its first success
	// ends the outage (OK), which wakes every connection waiting out its
	// backoff (Back). The connections can then back off long without
	// noticing late that Redis is back.
	Probe func() error

	mu    sync.Mutex
	down  bool
	since time.Time
	// failure: the outage under way began with a failure (Failed), not a
	// stall (see OKSince).
	failure bool
	// back is when the last outage ended (OK).
	back time.Time
	// isDown mirrors down for OK's lock-free fast path (OK runs for every
	// fetch reply).
	isDown atomic.Bool
	// backCh is closed when the outage under way ends (Back).
	backCh chan struct{}
	// probing: a goroutine tries Probe; closed: Close was called (no
	// more probing), and stop closed with it.
	probing bool
	closed  bool
	stop    chan struct{}
	// errors counts failures; outages counts outages begun (metrics).
	errors, outages atomic.Int64
	done            sync.WaitGroup // the probe
}

// Counts returns how many Redis failures were recorded and how many
// outages began.
func (o *OutageLog) Counts() (errors, outages int64) { return o.errors.Load(), o.outages.Load() }

// Failed records a failure; the first one of an outage is logged.
func (o *OutageLog) Failed(err error) {
	o.errors.Add(1)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.down {
		return
	}
	o.outages.Add(1)
	o.down = true
	o.failure = true
	o.isDown.Store(true)
	o.since = time.Now()
	if o.Log != nil {
		o.Log.Error().Err(err).Str("component", "redis").Msg("redis unavailable; retrying with backoff")
	}
	if o.Probe != nil && !o.probing && !o.closed {
		o.probing = true
		if o.stop == nil {
			o.stop = make(chan struct{})
		}
		o.done.Add(1)
		go o.probe(o.stop)
	}
}

// Close stops probing and waits for the probe to return.
func (o *OutageLog) Close() {
	o.mu.Lock()
	if !o.closed {
		o.closed = true
		if o.stop != nil {
			close(o.stop)
		}
	}
	o.mu.Unlock()
	o.done.Wait()
}

// probeEvery is how often Probe is tried during an outage.
const probeEvery = 200 * time.Millisecond

// probe tries Probe until it succeeds (OK), the outage ends otherwise, or
// Close.
func (o *OutageLog) probe(stop chan struct{}) {
	defer o.done.Done()
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-stop:
			o.mu.Lock()
			o.probing = false
			o.mu.Unlock()
			return
		}
		// The end of the outage and the end of probing are one step: a
		// failure that starts the next outage meanwhile would otherwise
		// find probing still set, and no probe would end that outage.
		o.mu.Lock()
		if !o.down {
			o.probing = false
			o.mu.Unlock()
			return
		}
		o.mu.Unlock()
		if o.Probe() == nil {
			o.OK()
		}
	}
}

// Stalled records that Redis has not answered a command for d: it is
// stalled (SIGSTOP, a long fork, a saturated host) or unreachable. The
// first report of an outage is logged; OK logs its end.
//
// A report about a command that was already waiting when the last outage
// ended is that outage's, arriving late (a stall watch that looked just
// before the command's own reply was read, while another connection's
// reply had ended the outage): it is dropped, not logged as a new outage.
// A new stall right after a recovery is reported by the commands sent
// since, once they have waited d.
func (o *OutageLog) Stalled(d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.down {
		return
	}
	if !o.back.IsZero() && !o.back.Before(time.Now().Add(-d)) {
		return
	}
	o.outages.Add(1)
	o.down = true
	o.failure = false
	o.isDown.Store(true)
	o.since = time.Now().Add(-d)
	if o.Log != nil {
		o.Log.Error().Str("no_reply_for", LogDuration(d)).Str("component", "redis").
			Msg("redis is not answering; still waiting on its connections (nothing is dropped)")
	}
}

// OKSince records the success of a command sent at sent. A command sent
// before an outage that a failure began says nothing about Redis now: its
// reply was on its way, read from a buffer after another connection saw
// Redis go (a killed server's last replies). It ends no such outage, which
// would log a second one at the next failure. A stall's own commands do
// end it: Redis answered them.
func (o *OutageLog) OKSince(sent time.Time) {
	if !o.isDown.Load() {
		return
	}
	o.mu.Lock()
	stale := o.down && o.failure && sent.Before(o.since)
	o.mu.Unlock()
	if !stale {
		o.OK()
	}
}

// OK records a success; it logs the end of an outage.
func (o *OutageLog) OK() {
	if !o.isDown.Load() {
		return
	}
	o.mu.Lock()
	if !o.down {
		o.mu.Unlock()
		return
	}
	o.down = false
	o.isDown.Store(false)
	o.back = time.Now()
	d := o.back.Sub(o.since)
	if o.backCh != nil {
		close(o.backCh)
		o.backCh = nil
	}
	o.mu.Unlock()
	if o.Log != nil {
		o.Log.Info().Str("outage", LogDuration(d)).Str("component", "redis").Msg("redis is back")
	}
}

// Back returns a channel closed when the outage under way ends (at once
// when there is none): a component waiting out its backoff retries as
// soon as any other has reached Redis again.
func (o *OutageLog) Back() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.down {
		return closedCh
	}
	if o.backCh == nil {
		o.backCh = make(chan struct{})
	}
	return o.backCh
}

var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// LogDuration is how gojob's logs write a duration: a Go duration string
// with its unit, to the millisecond ("4.304s", "250ms", "2m3.5s"), never a
// bare number (zerolog's Dur writes milliseconds without saying so).
func LogDuration(d time.Duration) string {
	if d >= time.Millisecond || d <= -time.Millisecond {
		d = d.Round(time.Millisecond)
	}
	return d.String()
}

// StaleRetries is how many connection errors are retried at once before an
// outage is declared: after a Redis restart the pool still holds dead
// connections, which fail once each.
const StaleRetries = 3

// Retrier runs writes that must not be lost (retry and dead entries,
// requeues, the poller's pushes) until they succeed, riding out a Redis
// outage with backoff, until its context ends.
type Retrier struct {
	// Pool lends the connections.
	Pool *redis.Pool
	// Ctx bounds the retries: the server cancels it when its shutdown
	// gives up.
	Ctx context.Context
	// Outage is told about failures and recoveries.
	Outage *OutageLog
}

// Do runs f on a pooled connection until it succeeds, fails with a Redis
// error reply, or r.Ctx ends.
func (r *Retrier) Do(f func(redis.Conn) error) error {
	return r.Retry(func() error {
		conn, err := r.Pool.GetContext(r.Ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		return f(conn)
	})
}

// Retry runs f until it succeeds, fails with an error that is neither a
// connection failure nor a transient error reply (IsTransient), or r.Ctx
// ends, backing off while Redis is unreachable.
func (r *Retrier) Retry(f func() error) error {
	var b Backoff
	for attempt := 1; ; attempt++ {
		sent := time.Now()
		err := f()
		if err == nil {
			r.Outage.OKSince(sent)
			return nil
		}
		if !(IsConnError(err) || IsTransient(err)) || r.Ctx.Err() != nil {
			return err
		}
		if attempt <= StaleRetries && IsConnError(err) {
			continue // a stale pooled connection; the pool drops it
		}
		r.Outage.Failed(err)
		t := time.NewTimer(b.Next())
		select {
		case <-t.C:
		case <-r.Outage.Back(): // another connection got through
			t.Stop()
		case <-r.Ctx.Done():
			t.Stop()
			return err
		}
	}
}

// Down reports whether an outage is going on (a failure not yet followed
// by a success).
func (o *OutageLog) Down() bool { return o.isDown.Load() }
