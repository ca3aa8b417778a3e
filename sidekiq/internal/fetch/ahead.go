package fetch

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/sidekiq/internal/redisx"
)

// Fetching ahead (reliable fetch). A job that waits for something other
// than its own work leaves its slot idle: the durable middleware waits for
// its row's lock, which is committed in one group with the other slots'
// locks, and only then runs the job. When such a job calls FetchAhead
// (sidekiq.Run.FetchAhead), its slot moves its next jobs to the in-progress
// list meanwhile, up to aheadDepth of them, so that the jobs after it
// start without a Redis round trip: with durable jobs their locks reach
// the group writer while the groups before them are written.
//
// Why more than one: a job's lock is queued when the job arrives, a
// Redis round trip after FetchAhead, by which time the group writer has
// usually started the next group; the lock then lands in the group after
// that. A slot with one job ahead therefore has one lock in each group,
// and a group holds about one lock per slot; with two ahead, about one and
// a half; with four, a little over two. A group's statement costs a fixed
// part (the round trip, the commit) and a part per job, so the bigger the
// groups, the more jobs per second (docs/durable.md, "Fetching and locking
// ahead"): eight ahead made groups of about 90 jobs at concurrency 25,
// against about 55 with four, and drained about 1.2 times as fast
// (medians of alternated rounds).
//
// How many: up to aheadDepth, but no more than the slot would run within
// half of aheadHold at the pace of its last job (aheadDepthAfter), so that
// a slot of slower jobs does not hold jobs that another slot or process
// could run sooner, and rarely has to give them back.
//
// The jobs fetched ahead are in the in-progress list like a running one,
// so a crash loses nothing (recovery gives them back), and the own-list
// sweep counts them as held (slotState.ahead). They go back to the pop
// end of their queue, where they run next, when the server goes quiet, or
// when the slot has not taken the oldest within aheadHold of its fetch:
// jobs fetched ahead of a long one must not wait behind it when another
// slot or process could run them. A slot whose last job took longer than
// aheadMaxRun does not fetch ahead at all, so that a queue of long jobs
// does not pay a fetch and a give-back for each. Only the non-blocking
// fetch is used: an empty queue fetches nothing ahead.
//
// Busy slots: a slot whose last job was short also fetches ahead on its
// own, with Config.Prepare, when it starts a job while no slot may be
// idle for want of a job (idleSlots: no idle token waits for a taker, and
// the last round found no queue empty). A process whose slots are all
// busy takes a job per freed slot, each after a taker's round trip; a
// slot that holds its next jobs starts them at once, and the moves of all
// the busy slots share the batcher's round trips. On the bench (one queue
// of no-op jobs, concurrency 25) this drained about twice as fast as
// without, with less of gojob's and Redis's CPU per job
// (docs/benchmarks.md). While a slot is idle it does not: the idle slots
// take the jobs there are, in parallel, rather than one busy slot taking
// them in turn. (The acknowledgements stay with the acker: riding in the
// batcher's rounds, they halved the write calls but cost more CPU per job
// and drained slower on the bench.)
//
// Each slot that fetches ahead has one goroutine for it (ahead.loop,
// started at its first FetchAhead): it asks for the fetches, prepares the
// jobs and gives back those the slot did not take in time. The fetches of
// every slot are made by one goroutine (aheadBatcher), in one round trip
// for all the slots that asked meanwhile: with durable jobs every slot
// asks for about every job it runs, and a round trip per slot cost more
// of gojob's and Redis's CPU than the jobs.

const (
	// aheadMaxRun is the longest a slot's last job may have taken (its
	// whole processing, waits included) for the slot to fetch ahead.
	aheadMaxRun = 5 * time.Millisecond
	// aheadHold is how long a job fetched ahead waits for its slot before
	// it goes back to its queue.
	aheadHold = 25 * time.Millisecond
	// aheadDepth is how many jobs a slot holds fetched ahead at most.
	aheadDepth = 8
)

// aheadJob is a job fetched ahead and when it goes back if its slot has
// not taken it.
type aheadJob struct {
	u     Unit
	until time.Time
}

// ahead is one reliable slot's fetch ahead.
type ahead struct {
	f  *reliableFetch
	st *slotState
	r  *rand.Rand

	// armed: the running job may call FetchAhead (once).
	armed   atomic.Bool
	lastRun time.Duration // slot goroutine only

	mu sync.Mutex
	// q is the jobs fetched and prepared, oldest first.
	q []aheadJob
	// want is the fetches asked for that loop has not finished; next
	// waits for them rather than fetch on its own.
	want    int
	prepare func(*Unit)
	started bool // loop runs (or ran)
	over    bool // loop returned: FetchAhead asks for nothing more

	// req is the slot's request to the batcher (one at a time).
	req aheadReq

	kick    chan struct{} // want grew
	arrived chan struct{} // a fetch ended (a job queued, or none)
	exit    chan struct{} // the slot has returned
	done    chan struct{} // loop has returned
}

func newAhead(f *reliableFetch, st *slotState, r *rand.Rand) *ahead {
	return &ahead{
		f: f, st: st, r: r,
		kick: make(chan struct{}, 1), arrived: make(chan struct{}, 1),
		exit: make(chan struct{}), done: make(chan struct{}),
		req: aheadReq{done: make(chan struct{}, 1)},
	}
}

// FetchAhead lets the slot running u fetch its next jobs now, while u
// waits (see ahead.go), until it holds as many as aheadDepthAfter allows.
// prepare, when not nil, is called with each job fetched, on the goroutine
// that fetched it, before the slot may take it; what it sets in the unit's
// Prepared travels with it. It reports whether the slot fetches ahead: false for a
// fetch that does not fetch ahead, a slot whose last job was long, a
// server going quiet, or a second call.
func (u *Unit) FetchAhead(prepare func(next *Unit)) bool {
	a := u.ahead
	if a == nil || !a.armed.CompareAndSwap(true, false) {
		return false
	}
	return a.request(prepare)
}

// request asks for the slot's fetches ahead, up to what aheadDepthAfter
// allows, each job prepared with prepare; false once the slot fetches
// ahead no more.
func (a *ahead) request(prepare func(next *Unit)) bool {
	a.mu.Lock()
	if a.over {
		a.mu.Unlock()
		return false
	}
	a.prepare = prepare
	n := a.f.aheadDepthAfter(a.lastRun) - len(a.q) - a.want
	if n > 0 {
		a.want += n
	}
	start := !a.started
	a.started = true
	a.mu.Unlock()
	if start {
		go a.loop()
	}
	if n > 0 {
		signal(a.kick)
	}
	return true
}

// aheadDepthAfter is how many jobs a slot whose last job took lastRun (its
// whole processing, waits included; 0 before its first) holds fetched
// ahead: as many as it runs within half of aheadHold at that pace, at
// least one and at most aheadDepth. With the defaults, a slot of jobs
// that take up to 1.5 ms holds eight, one of 3 ms four, one of 4 ms three
// (from 5 ms on, aheadMaxRun, it fetches none ahead).
func (f *reliableFetch) aheadDepthAfter(lastRun time.Duration) int {
	if lastRun <= 0 {
		return f.aheadDepth
	}
	return min(max(int(f.aheadHold/2/lastRun), 1), f.aheadDepth)
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// process runs u in the slot, armed for FetchAhead when the slot's last
// job was short; when every slot is busy, the slot fetches ahead at once
// (a saturated process: see "Busy slots" above).
func (a *ahead) process(slot int, tid string, u Unit) {
	f := a.f
	if f.aheadDepth > 0 && a.lastRun < f.aheadMaxRun && !f.cfg.quiet() {
		a.armed.Store(true)
		u.ahead = a
		if f.cfg.Prepare != nil && !f.idleSlots() {
			a.request(f.cfg.Prepare) // the job may still call FetchAhead
		}
	}
	start := time.Now()
	a.f.cfg.Process(slot, tid, u)
	a.lastRun = time.Since(start)
	a.armed.Store(false)
}

// next returns the oldest job fetched ahead, waiting for a fetch still
// under way when there is none yet; false when there is none.
func (a *ahead) next() (Unit, bool) {
	for {
		a.mu.Lock()
		if len(a.q) > 0 {
			u := a.q[0].u
			a.q = slices.Delete(a.q, 0, 1)
			a.mu.Unlock()
			return u, true
		}
		if a.want == 0 {
			a.mu.Unlock()
			return Unit{}, false
		}
		a.mu.Unlock()
		<-a.arrived
	}
}

// close ends the slot's fetch ahead when the slot returns: loop gives
// back what it holds and returns.
func (a *ahead) close() {
	close(a.exit)
	a.mu.Lock()
	started := a.started
	a.over = true
	a.mu.Unlock()
	if started {
		<-a.done
	}
}

// loop makes the slot's fetches ahead, and gives back the jobs the slot
// has not taken within aheadHold, or all of them at quiet or when the
// slot returns.
func (a *ahead) loop() {
	defer close(a.done)
	f := a.f
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var timerAt time.Time // when timer fires; zero when stopped
	for {
		select {
		case <-a.kick:
		case <-timer.C:
			timerAt = time.Time{}
		case <-f.cfg.Quiet:
			a.finish()
			return
		case <-a.exit:
			a.finish()
			return
		}
		a.giveBack(false)
		a.fetch()
		a.mu.Lock()
		if len(a.q) > 0 {
			if head := a.q[0].until; timerAt.IsZero() || head.Before(timerAt) {
				timer.Reset(time.Until(head))
				timerAt = head
			}
		}
		a.mu.Unlock()
	}
}

// fetch makes the fetches asked for, in one round trip, and queues the
// jobs for the slot; an empty queue leaves the rest unmade.
func (a *ahead) fetch() {
	f := a.f
	if f.cfg.quiet() {
		return
	}
	a.mu.Lock()
	want, prepare := a.want, a.prepare
	a.mu.Unlock()
	if want == 0 {
		return
	}
	units, err := a.take(want)
	now := time.Now()
	for i := range units {
		if prepare != nil {
			prepare(&units[i])
		}
	}
	a.mu.Lock()
	if err != nil || len(units) < want {
		a.want = 0
	} else {
		a.want -= len(units)
	}
	for _, u := range units {
		a.q = append(a.q, aheadJob{u: u, until: now.Add(f.aheadHold)})
	}
	a.mu.Unlock()
	signal(a.arrived)
}

// take moves up to want jobs into the slot's lists, in the batcher's
// next round, never blocking: a queue believed empty gives none. A failed
// round trip gives none; the slot then fetches as usual.
func (a *ahead) take(want int) ([]Unit, error) {
	f := a.f
	f.batcher.once.Do(func() {
		f.wg.Add(1) // the slot's worker is in f.wg until loop returns
		go f.batcher.run()
	})
	r := &a.req
	r.a, r.want, r.units, r.err = a, want, r.units[:0], nil
	select {
	case f.batcher.reqs <- r:
	case <-f.cfg.Quiet:
		return nil, nil
	}
	<-r.done // a request taken is always answered
	return r.units, r.err
}

// aheadReq is one slot's request for jobs fetched ahead, and its answer.
type aheadReq struct {
	a     *ahead
	want  int
	units []Unit
	err   error
	done  chan struct{} // capacity 1: answered
	// from and to are its moves in the batcher's round.
	from, to int
}

// aheadBatcher makes the slots' fetches ahead, those asked for while a
// round was on its way in the next round, on a connection of its own.
type aheadBatcher struct {
	f    *reliableFetch
	reqs chan *aheadReq // unbuffered: a request sent is one taken
	once sync.Once
	c    redis.Conn
	rd   round
	// rounds counts the round trips made (tests).
	rounds atomic.Int64
}

func (b *aheadBatcher) run() {
	defer b.f.wg.Done()
	defer b.drop()
	var reqs []*aheadReq
	for {
		select {
		case r := <-b.reqs:
			reqs = append(reqs[:0], r)
		case <-b.f.cfg.Quiet:
			return
		}
	more:
		for {
			select {
			case r := <-b.reqs:
				reqs = append(reqs, r)
			default:
				break more
			}
		}
		b.take(reqs)
		for _, r := range reqs {
			r.done <- struct{}{}
		}
		clear(reqs)
	}
}

// take makes one round of the moves asked for and gives each request its
// jobs. A failed round ends the epoch, as a taker's does; it returns no
// slot token, as these slots are running a job.
func (b *aheadBatcher) take(reqs []*aheadReq) {
	f := b.f
	cfg := f.cfg
	if !f.ids.fresh() {
		return
	}
	rd := &b.rd
	rd.moves = rd.moves[:0]
	for _, r := range reqs {
		r.from = len(rd.moves)
		for range r.want {
			var m move
			if !f.planMove(&m, r.a.st, r.a.r) {
				break
			}
			rd.moves = append(rd.moves, m)
		}
		r.to = len(rd.moves)
	}
	defer clear(rd.moves)
	if len(rd.moves) == 0 {
		return
	}
	if b.c == nil {
		c, err := cfg.dial()
		if err != nil {
			cfg.Outage.Failed(err)
			for _, r := range reqs {
				r.err = err
			}
			return
		}
		b.c = c
	}
	b.rounds.Add(1)
	err := f.send(b.c, rd)
	for _, r := range reqs {
		r.err = err
		for i := r.from; i < r.to; i++ {
			if m := &rd.moves[i]; m.raw != nil {
				r.units = append(r.units, f.unit(m))
			}
		}
	}
	if err != nil && !isReply(err) {
		f.drops.Add(1)
		f.ids.bump() // a move may have run unseen
		cfg.Outage.Failed(err)
		cfg.Health.failed(err)
	}
	if err != nil && (!isReply(err) || redisx.IsTransient(err)) {
		// Broken, or refused by a Redis that is loading or no longer the
		// master: the next round dials the master of the moment.
		b.drop()
	}
}

func (b *aheadBatcher) drop() {
	if b.c != nil {
		b.c.Close()
		b.c = nil
	}
}

// finish gives back every job the slot has not taken and stops the
// fetches: the server is going quiet, or the slot has returned.
func (a *ahead) finish() {
	a.mu.Lock()
	a.over = true
	a.mu.Unlock()
	a.giveBack(true)
}

// giveBack sends the jobs the slot holds back to the pop end of their
// queue, in their order (the oldest to be popped first): all of them when
// all is set, or once the oldest has waited aheadHold (the slot is busy
// with a long job, and the ones behind it would wait as long).
func (a *ahead) giveBack(all bool) {
	a.mu.Lock()
	if all {
		a.want = 0
	}
	n := len(a.q)
	if n == 0 || !all && a.q[0].until.After(time.Now()) {
		a.mu.Unlock()
		if all {
			signal(a.arrived) // want is 0: next waits no more
		}
		return
	}
	units := make([]Unit, n)
	for i := range n {
		// Newest first: the requeue script pushes in order, and the last
		// one pushed is popped first.
		units[i] = a.q[n-1-i].u
	}
	clear(a.q)
	a.q = a.q[:0]
	a.mu.Unlock()
	signal(a.arrived)
	// requeueUnits logs each job it could not give back; the jobs leave
	// the slot's mirror once the script has run (see Requeue).
	_, err := requeueUnits(a.f.cfg, units)
	a.f.released(units, err)
}
