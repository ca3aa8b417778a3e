package fetch

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/tuning"
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
// them in turn. The one exception is the moment a taker holds the idle
// slots' tokens (gathering them, or moving for them) after a round that
// found jobs: a busy slot may then take a job that an idle one would have,
// and the job waits aheadHold at most. Counting those slots as idle too
// cut fetching ahead so much on a busy drain that it lost most of its
// gain. (The acknowledgements stay with the acker: riding in the
// batcher's rounds, they halved the write calls but cost more CPU per job
// and drained slower on the bench.)
//
// One goroutine makes the fetches of every slot (aheadBatcher), in one
// round trip for all the slots that asked meanwhile: with durable jobs
// every slot asks for about every job it runs, and a round trip per slot
// cost more of gojob's and Redis's CPU than the jobs. A slot asks by
// joining the batcher's pending list, which never waits, and the batcher
// prepares the jobs and queues them for the slot itself, so a fetch ahead
// wakes the batcher and, when it was waiting for a job, the slot; on the
// bench, handing each request to a goroutine of the slot's that waited for
// the batcher's answer cost about a fifth more of gojob's CPU per job.
// Each slot that fetches ahead also has a goroutine (ahead.loop, started
// at its first request) whose timer gives back what the slot did not take
// in time.

const (
	// aheadMaxRun is the longest a slot's last job may have taken (its
	// whole processing, waits included) for the slot to fetch ahead.
	aheadMaxRun = 5 * time.Millisecond
	// aheadHold is how long a job fetched ahead waits for its slot before
	// it goes back to its queue (Config.AheadHold changes it, and
	// aheadMaxRun with it, a fifth of it).
	aheadHold = 25 * time.Millisecond
	// aheadDepth is how many jobs a slot holds fetched ahead at most.
	aheadDepth = tuning.FetchAhead
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
	armed atomic.Bool
	// lastRun is how long the slot's last job took, lastSize how large it
	// was (slot goroutine only).
	lastRun  time.Duration
	lastSize int

	mu sync.Mutex
	// q is the jobs fetched and prepared, oldest first.
	q fifo[aheadJob]
	// want is the fetches asked for that the batcher has not answered;
	// next waits for them rather than fetch on its own.
	want    int
	prepare func(*Unit)
	started bool // loop runs (or ran)
	over    bool // loop returned: FetchAhead asks for nothing more
	// timed: loop's timer is set, for the oldest job queued or an older
	// one; a job queued meanwhile needs no kick.
	timed bool

	// queued: the slot is in the batcher's pending list (guarded by the
	// batcher's mu, not this one).
	queued bool
	// req is the slot's request in the batcher's round (batcher only).
	req aheadReq

	kick    chan struct{} // jobs were queued while the timer was not set
	arrived chan struct{} // a fetch ended (a job queued, or none)
	exit    chan struct{} // the slot has returned
	done    chan struct{} // loop has returned
}

func newAhead(f *reliableFetch, st *slotState, r *rand.Rand) *ahead {
	return &ahead{
		f: f, st: st, r: r,
		kick: make(chan struct{}, 1), arrived: make(chan struct{}, 1),
		exit: make(chan struct{}), done: make(chan struct{}),
	}
}

// fetchAhead requests the slot's fetches ahead once the running job is
// armed (see Unit.FetchAhead).
func (a *ahead) fetchAhead(prepare func(next *Unit)) bool {
	if !a.armed.CompareAndSwap(true, false) {
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
	n := a.f.aheadDepthAfter(a.lastRun, a.lastSize) - a.q.len() - a.want
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
		a.f.batcher.submit(a)
	}
	return true
}

// aheadBytes bounds the payloads a slot holds ahead, by the size of its
// last job: the memory held ahead by a process with 10 KB jobs stays that
// of a process with small ones (docs/benchmarks.md, "Memory").
const aheadBytes = 64 << 10

// aheadDepthAfter is how many jobs a slot whose last job took lastRun (its
// whole processing, waits included; 0 before its first) and was size
// bytes long holds fetched ahead: as many as it runs within half of
// aheadHold at that pace, at least one and at most aheadDepth, and no
// more than aheadBytes of jobs that size. With the defaults, a slot of jobs
// that take up to 0.75 ms holds sixteen, one of 1.5 ms eight, one of 3 ms
// four, one of 4 ms three (from 5 ms on, aheadMaxRun, it fetches none
// ahead). Sixteen rather than eight made rounds twice as large: on the
// bench (one queue of no-op jobs) gojob spent 0.86x the CPU per job;
// beyond sixteen the gain was within the noise.
func (f *reliableFetch) aheadDepthAfter(lastRun time.Duration, size int) int {
	depth := f.aheadDepth
	if size > 0 {
		depth = min(depth, max(aheadBytes/size, 1))
	}
	if lastRun <= 0 {
		return depth
	}
	return min(max(int(f.aheadHold/2/lastRun), 1), depth)
}

// process runs u in the slot, armed for FetchAhead when the slot's last
// job was short; when every slot is busy, the slot fetches ahead at once
// (a saturated process: see "Busy slots" above).
func (a *ahead) process(slot int, u Unit) {
	f := a.f
	if f.aheadDepth > 0 && a.lastRun < f.aheadMaxRun && !f.cfg.quiet() {
		a.armed.Store(true)
		u.ahead = a
		if f.cfg.Prepare != nil && !f.idleSlots() {
			a.request(f.cfg.Prepare) // the job may still call FetchAhead
		}
	}
	a.lastSize = len(u.Raw)
	a.lastRun = a.f.cfg.Process(slot, u)
	a.armed.Store(false)
}

// next returns the oldest job fetched ahead, waiting for a fetch still
// under way when there is none yet; false when there is none.
func (a *ahead) next() (Unit, bool) {
	for {
		a.mu.Lock()
		if a.q.len() > 0 {
			u := a.q.pop().u
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

// loop gives back the jobs the slot has not taken within aheadHold, or
// all of them at quiet or when the slot returns. Its timer is set for the
// oldest job queued; the batcher kicks it when it queues jobs while the
// timer is not set.
func (a *ahead) loop() {
	defer close(a.done)
	f := a.f
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-a.kick:
		case <-timer.C:
		case <-f.cfg.Quiet:
			a.finish()
			return
		case <-a.exit:
			a.finish()
			return
		}
		a.giveBack(false)
		a.mu.Lock()
		a.timed = a.q.len() > 0
		if a.timed {
			timer.Reset(time.Until(a.q.front().until))
		}
		a.mu.Unlock()
	}
}

// deliver queues for the slot the jobs the batcher moved for it (of want
// asked for; err is the round's), prepared with prepare. A slot that has
// returned, or gone quiet, gives them back at once.
func (a *ahead) deliver(units []Unit, want int, prepare func(*Unit), err error, now time.Time) {
	if prepare != nil {
		for i := range units {
			prepare(&units[i])
		}
	}
	a.mu.Lock()
	if err != nil || len(units) < want {
		a.want = 0
	} else {
		a.want -= len(units)
	}
	if a.over {
		a.want = 0
		a.mu.Unlock()
		signal(a.arrived)
		a.giveBackUnits(units)
		return
	}
	for _, u := range units {
		a.q.push(aheadJob{u: u, until: now.Add(a.f.aheadHold)})
	}
	kick := len(units) > 0 && !a.timed
	a.mu.Unlock()
	signal(a.arrived)
	if kick {
		signal(a.kick)
	}
}

// aheadReq is one slot's part of a batcher's round: the jobs it asked
// for, its moves in the round and its answer.
type aheadReq struct {
	want     int
	prepare  func(*Unit)
	units    []Unit
	from, to int
}

// aheadBatcher makes the slots' fetches ahead: those asked for while a
// round was on its way go in the next round, on a connection of its own.
// A slot asks by joining the pending list (submit), which never waits;
// the batcher queues each slot's jobs itself (deliver), so a fetch ahead
// wakes no goroutine but the batcher's.
type aheadBatcher struct {
	f    *reliableFetch
	once sync.Once
	mu   sync.Mutex
	// pending is the slots that asked since the last round was planned.
	pending []*ahead
	wake    chan struct{} // capacity 1: pending grew
	c       redis.Conn
	rd      round
	// taking is since when its round has been on its way (unix
	// nanoseconds; 0 when none): the jobs it moves are nobody's orphans
	// until they reach their slots, as a taker's (reliableFetch.taking).
	taking atomic.Int64
	// rounds counts the round trips made (tests).
	rounds atomic.Int64
}

// submit asks for a's fetches ahead in the batcher's next round.
func (b *aheadBatcher) submit(a *ahead) {
	b.once.Do(func() {
		b.f.wg.Add(1) // the slot's worker is in f.wg until loop returns
		go b.run()
	})
	b.mu.Lock()
	if !a.queued {
		a.queued = true
		b.pending = append(b.pending, a)
	}
	b.mu.Unlock()
	signal(b.wake)
}

func (b *aheadBatcher) run() {
	defer b.f.wg.Done()
	defer b.drop()
	var batch []*ahead
	for {
		select {
		case <-b.wake:
		case <-b.f.cfg.Quiet:
			return // the slots' loops give back what they hold
		}
		b.mu.Lock()
		batch = append(batch[:0], b.pending...)
		clear(b.pending)
		b.pending = b.pending[:0]
		for _, a := range batch {
			a.queued = false
		}
		b.mu.Unlock()
		if len(batch) > 0 {
			b.take(batch)
			clear(batch)
		}
	}
}

// take makes one round of the moves the slots asked for and queues each
// slot's jobs. A failed round ends the epoch, as a taker's does; it
// returns no slot token, as these slots are running a job. A queue
// believed empty gives none; a failed round trip gives none, and the slot
// then fetches as usual.
func (b *aheadBatcher) take(batch []*ahead) {
	f := b.f
	cfg := f.cfg
	rd := &b.rd
	rd.moves = rd.moves[:0]
	defer clear(rd.moves)
	quiet, fresh := cfg.quiet(), f.ids.fresh()
	for _, a := range batch {
		r := &a.req
		a.mu.Lock()
		r.want, r.prepare = a.want, a.prepare
		if a.over {
			r.want = 0
		}
		a.mu.Unlock()
		r.units = r.units[:0]
		r.from = len(rd.moves)
		for i := 0; i < r.want && !quiet && fresh; i++ {
			var m move
			if !f.planMove(&m, a.st, a.r) {
				break
			}
			rd.moves = append(rd.moves, m)
		}
		r.to = len(rd.moves)
	}
	var err error
	if len(rd.moves) > 0 {
		err = b.round(rd)
	}
	now := time.Now()
	for _, a := range batch {
		r := &a.req
		for i := r.from; i < r.to; i++ {
			if m := &rd.moves[i]; m.raw != nil {
				r.units = append(r.units, f.unit(m))
			}
		}
		a.deliver(r.units, r.want, r.prepare, err, now)
		clear(r.units)
	}
}

// round sends the moves of rd on the batcher's connection.
func (b *aheadBatcher) round(rd *round) error {
	f := b.f
	cfg := f.cfg
	if b.c == nil {
		c, err := cfg.dial()
		if err != nil {
			cfg.Outage.Failed(err)
			return err
		}
		b.c = c
	}
	b.rounds.Add(1)
	b.taking.Store(time.Now().UnixNano())
	defer b.taking.Store(0)
	err := f.send(b.c, rd)
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
	return err
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
	if a.q.len() == 0 || !all && a.q.front().until.After(time.Now()) {
		a.mu.Unlock()
		if all {
			signal(a.arrived) // want is 0: next waits no more
		}
		return
	}
	units := make([]Unit, 0, a.q.len())
	for a.q.len() > 0 {
		units = append(units, a.q.pop().u)
	}
	a.mu.Unlock()
	signal(a.arrived)
	a.giveBackUnits(units)
}

// giveBackUnits sends units, oldest first, back to the pop end of their
// queue in that order (the oldest to be popped first).
func (a *ahead) giveBackUnits(units []Unit) {
	if len(units) == 0 {
		return
	}
	// Newest first: the requeue script pushes in order, and the last one
	// pushed is popped first.
	slices.Reverse(units)
	// requeueUnits logs each job it could not give back; the jobs leave
	// the slot's mirror once the script has run (see Requeue).
	_, err := requeueUnits(a.f.cfg, units)
	a.f.released(units, err)
}
