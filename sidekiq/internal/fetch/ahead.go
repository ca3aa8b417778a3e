package fetch

import (
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/gojob/gojob/sidekiq/wire"
)

// Fetching ahead (reliable fetch). A job that waits for something other
// than its own work leaves its slot idle: the durable middleware waits for
// its row's lock, which is committed in one group with the other slots'
// locks, and only then runs the job. When such a job calls FetchAhead
// (sidekiq.FetchAhead), its slot moves its next job to the in-progress
// list meanwhile, so that the job after it starts without a Redis round
// trip: with durable jobs every slot's next lock then reaches the group
// writer within microseconds of the last group's answer, instead of after
// each slot's fetch.
//
// The job fetched ahead is in the in-progress list like a running one, so
// a crash loses nothing (recovery gives it back), and the own-list sweep
// counts it as held (slotState.ahead). It is given back to the pop end of
// its queue, where it runs next, when the server goes quiet, or when the
// slot has not taken it within aheadHold: a job fetched ahead of a long
// one must not wait behind it when another slot or process could run it.
// A slot whose last job took longer than aheadMaxRun does not fetch ahead
// at all, so that a queue of long jobs does not pay a fetch and a give-back
// for each. A slot holds at most one job ahead, and only the non-blocking
// fetch is used: an empty queue fetches nothing ahead.

const (
	// aheadMaxRun is the longest a slot's last job may have taken (its
	// whole processing, waits included) for the slot to fetch ahead.
	aheadMaxRun = 5 * time.Millisecond
	// aheadHold is how long a job fetched ahead waits for its slot before
	// it goes back to its queue.
	aheadHold = 25 * time.Millisecond
)

// The states of a slot's ahead for the job it runs.
const (
	aheadOff     int32 = iota // not allowed, or the job is over
	aheadArmed                // FetchAhead may start the fetch
	aheadStarted              // the fetch is under way: next reads its result
)

// ahead is one reliable slot's fetch ahead.
type ahead struct {
	f  *reliableFetch
	st *slotState
	r  *rand.Rand
	// now and decode are the single queue's non-blocking move (nil with
	// several queues: the take script).
	now    pipeCmd
	decode func(any) (fetchReply, error)
	req    *fetchReq

	state   atomic.Int32
	prepare func(*Unit)
	// pending: a fetch was started for the last job, and next must read
	// its result (slot goroutine only).
	pending bool
	lastRun time.Duration
	// hand gives the job fetched to the slot; none says there is none
	// (nothing fetched, or given back).
	hand  chan Unit
	none  chan struct{}
	timer *time.Timer
}

func newAhead(f *reliableFetch, st *slotState, r *rand.Rand, now pipeCmd, decode func(any) (fetchReply, error)) *ahead {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &ahead{
		f: f, st: st, r: r, now: now, decode: decode,
		req:  &fetchReq{cmds: make([]pipeCmd, 1), reply: make(chan fetchReply, 1)},
		hand: make(chan Unit), none: make(chan struct{}, 1), timer: t,
	}
}

// FetchAhead lets the slot running u fetch its next job now, while u
// waits (see ahead.go). prepare, when not nil, is called with the job
// fetched, on the goroutine that fetched it, before the slot may take it;
// what it sets in the unit's Prepared travels with it. It reports whether
// the fetch started: false for a fetch that does not fetch ahead, a slot
// whose last job was long, or a second call.
func (u *Unit) FetchAhead(prepare func(next *Unit)) bool {
	if a := u.ahead; a != nil && a.state.CompareAndSwap(aheadArmed, aheadStarted) {
		a.prepare = prepare
		go a.fetch()
		return true
	}
	return false
}

// process runs u in the slot, armed for FetchAhead when the slot's last
// job was short.
func (a *ahead) process(slot int, tid string, u Unit) {
	if a.lastRun < a.f.aheadMaxRun {
		a.state.Store(aheadArmed)
		u.ahead = a
	}
	start := time.Now()
	a.f.cfg.Process(slot, tid, u)
	a.lastRun = time.Since(start)
	if !a.state.CompareAndSwap(aheadArmed, aheadOff) && a.state.Load() == aheadStarted {
		a.pending = true
	}
}

// next returns the job fetched ahead of the last one, waiting for the
// fetch if it is still under way; false when there is none.
func (a *ahead) next() (Unit, bool) {
	if !a.pending {
		return Unit{}, false
	}
	a.pending = false
	a.state.Store(aheadOff)
	select {
	case u := <-a.hand:
		return u, true
	case <-a.none:
		return Unit{}, false
	}
}

// fetch moves the slot's next job to the in-progress list and holds it
// for the slot, or gives it back (quiet, or aheadHold passed).
func (a *ahead) fetch() {
	f := a.f
	req := a.req
	list := ""
	if f.single {
		req.cmds[0], req.decode = a.now, a.decode
		list = a.now.args[1].(string)
	} else {
		f.takeNow(req, a.r)
	}
	rep, ok := f.pipes.do(req)
	if !ok || !f.fetched(&rep) {
		a.none <- struct{}{}
		return
	}
	if list == "" {
		list = f.lists[wire.QueueKey(rep.queue)]
	}
	a.st.holdAhead(list, rep.raw)
	u := Unit{Queue: rep.queue, Raw: rep.raw, list: list, slot: a.st}
	if a.prepare != nil {
		a.prepare(&u)
		a.prepare = nil
	}
	a.timer.Reset(f.aheadHold)
	select {
	case a.hand <- u:
		a.timer.Stop()
		return
	case <-f.cfg.Quiet:
	case <-a.timer.C:
	}
	a.timer.Stop()
	a.st.dropIf(u.Raw)
	if _, err := requeueUnits(f.cfg, []Unit{u}); err != nil {
		f.cfg.Logger.Error().Err(err).Str("queue", u.Queue).Bytes("payload", u.Raw).
			Msg("could not give back a job fetched ahead; it stays in the in-progress list and is recovered when this process is gone")
	}
	a.none <- struct{}{}
}
