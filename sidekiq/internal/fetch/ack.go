package fetch

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/redisreply"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
	"github.com/gojob/gojob/sidekiq/internal/resp"
)

// ack is a finished job's acknowledgement: by position, `LTRIM list 0 -2`
// (the job is its list's oldest: lists.go), or by value, `LREM list -1
// job`.
type ack struct {
	list  string
	raw   []byte
	byPos bool
	// trimCmd is the positional acknowledgement encoded (the list's, made
	// once: see package resp).
	trimCmd []byte
	// resent marks an acknowledgement sent again after its first send's
	// connection broke: that send may have taken the job out already, so
	// finding it gone is no sign of another process's recovery.
	resent bool
	// held and slot: the job stays in its slot's mirror until its
	// acknowledgement has run (see reliableFetch.ackOf); resolve takes it
	// out.
	held *held
	slot *slotState
}

// resolve takes the acknowledged job out of its slot's mirror once its
// acknowledgement ran, or will not run (its list is then no longer
// acknowledged by position: the epoch ends).
func (a *ack) resolve() {
	if a.slot != nil {
		a.slot.release(a.held)
		a.slot, a.held = nil, nil
	}
}

// send queues the acknowledgement's command on c.
func (a *ack) send(c redis.Conn) {
	if a.byPos {
		c.Send("LTRIM", a.list, 0, -2)
	} else {
		c.Send("LREM", a.list, -1, a.raw)
	}
}

// checked reads the reply of the acknowledgement's command.
func (a *ack) checked(f *ackFetch, reply any) {
	r := resp.ReplyOf(reply)
	a.checkedReply(f, &r)
}

// checkedReply is checked for a reply read by a ReplyReader.
func (a *ack) checkedReply(f *ackFetch, r *resp.Reply) {
	if r.Kind != resp.ReplyError {
		a.resolve() // an error reply goes again (the caller's refused)
	}
	if a.byPos {
		if r.Kind == resp.ReplyError {
			f.ids.bump() // a list that is not one: no more positions in it
		}
		return
	}
	if r.Kind == resp.ReplyInt && r.Int == 0 && !a.resent {
		f.life.notOwned(a.list, a.raw)
	}
}

// recheck turns the positions of lists whose epoch has ended since they
// were decided into acknowledgements by value: an ended epoch means an
// acknowledgement of the same list may not have run (its connection
// broke, and it goes again by value), and a position sent after it would
// take out that older entry instead of its own.
func recheck(ids *idents, acks []ack) {
	for i := range acks {
		if k := &acks[i]; k.byPos && k.held != nil && !ids.current(k.held.sl.ident) {
			k.byPos = false
		}
	}
}

// acker takes finished jobs out of their lists when no round of the takers
// carries them. An acknowledgement never waits behind a take, so a job
// that has finished stays in flight (and would run again if the process
// died) for about one round trip.
//
// With hold > 0 the acker leaves queued acknowledgements for up to hold to
// the takers, which send them ahead of their next round's moves (steal):
// one round trip instead of two. What no round picks up within hold, the
// acker sends itself on a connection of its own, so idle queues delay an
// acknowledgement by hold at most. A position is sent once: when a send's
// connection breaks, the fetch's epoch ends and its acknowledgements go
// again by value, which finds nothing when the first send ran.
type acker struct {
	f    *ackFetch
	cfg  *Config
	hold time.Duration
	fc   conn

	mu sync.Mutex
	// queued are the acknowledgements waiting, oldest first (a backlog
	// is taken a batch at a time without moving the rest).
	queued fifo[ack]
	since  int64 // when the oldest queued acknowledgement was added (unix ns)
	closed bool
	kick   chan struct{} // capacity 1: something was queued, or close
	done   sync.WaitGroup

	// timer is run's wait for the hold (nil until first needed).
	timer *time.Timer
	// out is send's buffer for the encoded commands.
	out []byte

	// busySince is when the batch being sent was taken from the queue (unix
	// nanoseconds; 0 when idle): its jobs are finished, not orphans, until
	// the send ends (the own-list sweep asks).
	busySince atomic.Int64
}

// ackBatch is the most acknowledgements one write carries.
const ackBatch = 256

// rideMax is the most acknowledgements a round carries.
const rideMax = 256

// rideHold is how long the acknowledger leaves finished jobs to the takers
// before it sends them itself. A busy taker sends a round every few
// hundred microseconds at most; a parked one none, and then the
// acknowledger sends after rideHold.
const rideHold = 500 * time.Microsecond

// ackFetch is what the acknowledgements change in their fetch: a send
// that failed, or a position in a list that is not one, ends the epoch
// (ids) and counts as a drop (a failed round trip, reliableFetch.drops); a
// job an acknowledgement by value found gone is reported (life.notOwned).
type ackFetch struct {
	ids   *idents
	life  *reliableLife
	drops *atomic.Int64
}

func newAcker(cfg *Config, f *ackFetch) *acker {
	return &acker{f: f, cfg: cfg, fc: conn{cfg: cfg}, kick: make(chan struct{}, 1)}
}

// start runs the acknowledgements until close.
func (a *acker) start() {
	a.done.Add(1)
	go a.run()
}

// add queues an acknowledgement; after close it is sent at once.
func (a *acker) add(k ack) error {
	return a.addMany([]ack{k})
}

// addMany queues acknowledgements together, waking the acker once: the
// successes released at once go out in one write rather than in the
// first few the acker happened to take while the rest were being added.
func (a *acker) addMany(acks []ack) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return a.sendByValue(acks)
	}
	first := a.queued.len() == 0
	if first {
		a.since = time.Now().UnixNano()
	}
	a.queued.push(acks...)
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
	a.fc.close()
}

// waitingSince returns since when an acknowledgement has been queued or on
// its way (0: none).
func (a *acker) waitingSince() int64 {
	a.mu.Lock()
	since := a.since
	if a.queued.len() == 0 {
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
func (a *acker) take(buf []ack, max int) []ack {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.takeLocked(buf, max)
}

func (a *acker) takeLocked(buf []ack, max int) []ack {
	buf = a.queued.take(buf, max)
	// With some left, since stays that of the oldest taken: earlier than
	// theirs, which only makes the own-list sweep wait longer.
	return buf
}

// steal takes up to max queued acknowledgements for a taker that sends
// them in its round, and moves the taker's waiting time (taking, unix ns)
// back to when they were queued, in the same critical section, so that
// the own-list sweep never sees them neither here nor there. The caller
// sends them or gives them back with resend.
func (a *acker) steal(buf []ack, max int, taking *atomic.Int64) []ack {
	if a.hold == 0 {
		return buf
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.queued.len() > 0 {
		if w := taking.Load(); w == 0 || a.since < w {
			taking.Store(a.since)
		}
	}
	return a.takeLocked(buf, max)
}

// resend sends, by value, acknowledgements whose send's connection broke
// before their replies were read.
func (a *acker) resend(acks []ack) {
	if len(acks) == 0 {
		return
	}
	for i := range acks {
		acks[i].resent = true
	}
	a.sendByValue(acks)
}

func (a *acker) run() {
	defer a.done.Done()
	batch := make([]ack, 0, ackBatch)
	for range a.kick {
		if a.hold > 0 && !a.waitHold() {
			continue // the takers took them all; the next add kicks
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
		closed, empty := a.closed, a.queued.len() == 0
		a.mu.Unlock()
		if closed && empty {
			return
		}
	}
}

// waitHold waits until the oldest queued acknowledgement has been left to
// the takers for hold, and reports whether there is anything to send (or
// the acker is closing). The takers steal while it waits, and the oldest
// left after a steal is younger than the one it began waiting for: it
// waits again for that one, rather than sending acknowledgements queued a
// moment ago that the next round would have carried.
func (a *acker) waitHold() bool {
	for {
		a.mu.Lock()
		wait := a.since + int64(a.hold) - time.Now().UnixNano()
		closed, empty := a.closed, a.queued.len() == 0
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

// send sends acks in one write on the acker's connection. A connection
// that breaks ends the epoch and sends them again by value (through the
// retrier, which rides out an outage).
func (a *acker) send(acks []ack) {
	if !a.fc.ready() {
		a.sendByValue(acks) // quiet during an outage: through the retrier
		return
	}
	c := a.fc.c
	recheck(a.f.ids, acks)
	var err error
	sent := time.Now()
	rw, raw := resp.Raw(c)
	if raw {
		buf := a.out[:0]
		for i := range acks {
			buf = acks[i].appendTo(buf)
		}
		err = rw.WriteRaw(buf)
		a.out = resp.KeepBuf(buf)
	} else {
		for i := range acks {
			acks[i].send(c)
		}
		err = c.Flush()
	}
	var refused []ack
	var rp resp.RoundReader
	if err == nil {
		rp, err = resp.NewRoundReader(c, raw)
	}
	var rep resp.Reply
	for i := range acks {
		if err != nil {
			break
		}
		if err = rp.Next(&rep); err == nil {
			if rep.Kind == resp.ReplyError {
				refused = append(refused, acks[i]) // READONLY, LOADING: not run
			}
			acks[i].checkedReply(a.f, &rep)
		}
	}
	if err == nil {
		a.fc.ok(sent)
		if len(refused) > 0 {
			a.fc.close() // a replica now, say: the next one reaches the master
		}
		a.sendByValue(refused)
		return
	}
	a.f.drops.Add(1)
	a.f.ids.bump()
	a.fc.close()
	if a.fc.fresh || !redisx.IsConnError(err) {
		// A connection idle since before a Redis restart fails once
		// without an outage: the resend below goes on a new one.
		a.cfg.Outage.Failed(err)
		a.cfg.Health.failed(err)
	}
	for i := range acks {
		acks[i].resent = true
	}
	a.sendByValue(acks)
}

// sendByValue sends acks as LREMs in one pipeline, through an outage (the
// retrier retries on another connection; an LREM that ran finds nothing
// the second time).
func (a *acker) sendByValue(acks []ack) error {
	if len(acks) == 0 {
		return nil
	}
	for i := range acks {
		acks[i].byPos = false
	}
	var replies []any
	err := a.cfg.Writes.Do(func(conn redis.Conn) error {
		for i := range acks {
			acks[i].send(conn)
		}
		var err error
		replies, err = redisreply.Pipeline(context.Background(), conn)
		return err
	})
	if err != nil {
		a.cfg.Logger.Error().Err(err).Str("component", "fetch").Int("jobs", len(acks)).
			Msg("could not acknowledge finished jobs; they stay in the in-progress list and run again if this process dies")
		a.unresolved(acks)
		return err
	}
	for i, r := range replies {
		if i < len(acks) {
			acks[i].checked(a.f, r)
		}
	}
	a.unresolved(acks) // refused again
	return nil
}

// appendTo appends the acknowledgement's command (see send).
func (a *ack) appendTo(buf []byte) []byte {
	if a.byPos && a.trimCmd != nil {
		return append(buf, a.trimCmd...)
	}
	if a.byPos {
		return resp.AppendCmd(buf, "LTRIM", a.list, "0", "-2")
	}
	return resp.AppendLREM(buf, a.list, a.raw)
}

// unresolved gives up on acknowledgements that did not run: their jobs
// leave their slots' mirrors, and the epoch ends, so that no position is
// sent in their lists any more (the sweep of the own lists gives the jobs
// back).
func (a *acker) unresolved(acks []ack) {
	bump := false
	for i := range acks {
		if acks[i].slot != nil {
			acks[i].resolve()
			bump = true
		}
	}
	if bump {
		a.f.drops.Add(1)
		a.f.ids.bump()
	}
}
