package store

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Group commit: the three writes every durable job makes (the push's
// upsert, the lock when it starts, the delete after it succeeds) are
// gathered per database and applied together, one statement (PostgreSQL)
// or one transaction of multi-row statements (SQLite) for every op that
// arrived while the previous one ran. A caller waits until its own write
// is committed, so every promise of the durable package holds:
//
//   - a push writes the job to Redis only after its row is committed (or
//     after every database refused it);
//   - a job whose caller waits for its lock (Lock, Wait) runs only
//     after the lock (assume_dead_at = now + extension) is committed; a
//     caller that does not wait (the durable package, on PostgreSQL with
//     one database) may replace a lock no group took yet with the job's
//     success delete (DeleteInsteadOfLock);
//   - a job's success is acknowledged only after its delete is committed:
//     DeleteLocked returns then, and Group.DeleteAsync hands the answer to
//     the caller's Then, which decides when the acknowledgement is released
//     (Options.Release).
//
// What it saves is statements: under load each one carries the writes of
// many jobs. Options.BatchWindow bounds how long a write may
// wait for company when the database is idle (0, the default, waits for
// none: batches form only from the writes that arrive while a flush is
// running).

// opKind is the write an Op makes.
type opKind uint8

const (
	opUpsert opKind = iota + 1
	opLock
	opDelete
)

// Op is one write waiting for its group. A caller may keep a job's lock
// and delete ops in its own allocation (SetLock, SetDelete), so they stay
// small: an upsert's row is behind a pointer.
type Op struct {
	kind opKind
	// early marks a lock taken for a job fetched ahead of its slot's
	// current one, or for a job that runs without waiting for it (see
	// next).
	early bool
	// anyLock marks a delete that replaced its job's lock before the lock
	// was written (DeleteInsteadOfLock): it deletes the row whatever its
	// lock.
	anyLock bool
	// taken is set, under groupCommit.mu, once a writer took the op.
	taken bool
	up    *UpsertParams
	lk    LockParams
	del   DeleteParams

	// ok is the write's answer: created (upsert), found (lock), deleted
	// (delete).
	ok  bool
	err error
	// answered is set once ok and err are final, before the op's group
	// is closed.
	answered atomic.Bool
	// group is what the op's caller waits on: the group that will write
	// it (see gcWait). Set under groupCommit.mu, read by the caller.
	group atomic.Pointer[gcWait]
	// then, when set, is given the answer instead of a caller waiting
	// (doAsync).
	then Then
}

// SetLock makes op the lock p; early marks a job fetched ahead of the one
// its slot runs, whose lock is queued while that one finishes.
func (o *Op) SetLock(p LockParams, early bool) { *o = Op{kind: opLock, early: early, lk: p} }

// SetDelete makes op the success delete p.
func (o *Op) SetDelete(p DeleteParams) { *o = Op{kind: opDelete, del: p} }

// DeleteUnlocked reports whether op is a delete that replaced its job's
// lock before the lock was written (DeleteInsteadOfLock).
func (o *Op) DeleteUnlocked() bool { return o.kind == opDelete && o.anyLock }

// JID is the op's job.
func (o *Op) JID() string { return o.jid() }

// LockedAt is a lock's time.
func (o *Op) LockedAt() time.Time { return o.lk.LockedAt }

// Answered reports whether the op's write has its answer.
func (o *Op) Answered() bool { return o.answered.Load() }

// Lock marks the row as run by a process (op set by SetLock; written once,
// not reused). It reports whether the row exists.
func (g *Group) Lock(ctx context.Context, op *Op) (bool, error) { return g.gc.do(ctx, op) }

// LockStart queues Lock's write and returns at once; Wait waits for its
// answer. LockStart fails only when the store is closed.
func (g *Group) LockStart(op *Op) error { return g.gc.enqueue(op) }

// Wait waits for the answer of an op queued by LockStart, or of the delete
// that replaced it.
func (g *Group) Wait(ctx context.Context, op *Op) (bool, error) {
	if !g.gc.wait(ctx, op) {
		return false, ctx.Err()
	}
	return op.ok, op.err
}

// DeleteAsync is Store.DeleteLocked of op (set by SetDelete) that returns
// at once; then is given the answer once the delete is committed (or
// failed), and when it returns true, its Then is passed to Options.Release
// with the others of the same group, in one call.
func (g *Group) DeleteAsync(op *Op, then Then) { g.gc.doAsync(op, then) }

// DeleteInsteadOfLock turns lock, queued by LockStart, into the success
// delete of its job, deleting the row whatever its lock, if no group took
// the lock yet: a job that completed before its lock was written then
// costs the row one write instead of two. It reports whether it did; then
// is given the answer as with DeleteAsync (nil: Wait waits for it). false
// means the lock is written or being written (Wait has or will have its
// answer), or that the store does not do this (SQLite).
func (g *Group) DeleteInsteadOfLock(lock *Op, then Then) bool {
	if !g.replaces {
		return false
	}
	return g.gc.replaceLock(lock, then)
}

// WaitQueue waits until fewer than n writes wait for a group (or ctx ends).
func (g *Group) WaitQueue(ctx context.Context, n int) { g.gc.waitQueue(ctx, n) }

// gcWait is one group's completion, shared by every op in it: the writer
// closes done once it has answered them all, one close for the group
// rather than a channel per write. The ops still queued share the next
// one; an op that take leaves for a later group (its jid is being
// written, or the group is full) moves to the next one, and a caller woken
// by the group it was left out of waits again on its new group.
type gcWait struct{ done chan struct{} }

func (o *Op) jid() string {
	switch o.kind {
	case opUpsert:
		return o.up.JobID
	case opLock:
		return o.lk.JobID
	}
	return o.del.JobID
}

// gcApplier writes a group in one go, setting each op's ok. An error
// means no op of the group was applied.
type gcApplier func(ctx context.Context, ops []*Op) error

// groupCommit gathers one database's hot writes. `slots` writer
// goroutines (one for SQLite: its single writer) each take the next group
// as soon as they are done with the previous one; a jid appears at most
// once per group, and a jid's later writes wait until the group holding
// its earlier one is committed, so one process's writes of a row land in
// the order they were made.
type groupCommit struct {
	apply    gcApplier
	single   gcApplier // one op, after its group failed with an SQL error
	release  func([]Then)
	isConn   func(error) bool
	window   time.Duration
	maxBatch int
	slots    int

	mu    sync.Mutex
	queue []*Op
	// pending is the gcWait of every op in queue (nil when queue is
	// empty).
	pending  *gcWait
	inflight map[string]int
	// gather bounds the writer's wait for the cohort it released (see
	// next); 0 turns it off. The counts below serve it: the locks and
	// upserts in queue, the locks of the last group and how long it took
	// to write, and while the writer gathers, the queued locks it waits
	// for (0 otherwise).
	gather        time.Duration
	locksQueued   int
	upsertsQueued int
	lastLocks     int
	lastEarly     int // of lastLocks, those taken ahead (Op.early)
	lastWrite     time.Duration
	wantLocks     int
	// gatherSkip is how many groups are still to be written without a
	// wait; gatherMissed how many were skipped after the last miss.
	gatherSkip   int
	gatherMissed int
	held         map[string]bool // take's, kept for the next
	started      bool
	closed       bool
	kick         chan struct{}
	stop         chan struct{}
	wg           sync.WaitGroup
}

func newGroupCommit(apply, single gcApplier, isConn func(error) bool, window time.Duration, maxBatch, slots int) *groupCommit {
	return &groupCommit{
		apply: apply, single: single, isConn: isConn, window: window,
		maxBatch: max(maxBatch, 1), slots: max(slots, 1),
		inflight: map[string]int{}, held: map[string]bool{}, kick: make(chan struct{}, 1), stop: make(chan struct{}),
	}
}

// gcGatherMax bounds how long a store's writer gathers the cohort of jobs
// it released (groupCommit.next); the wait is otherwise as long as the
// last group took to write.
const gcGatherMax = 2 * time.Millisecond

// gcGatherMaxSkip bounds the groups written without a wait after gathers
// that missed their cohort, so that a writer tries again now and then.
const gcGatherMaxSkip = 64

// errGroupClosed reports a write submitted after close.
var errGroupClosed = errors.New("durable: store closed")

// enqueue queues ops for the writers (started on first use); it reports
// errGroupClosed, queueing nothing, after close.
func (g *groupCommit) enqueue(ops ...*Op) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return errGroupClosed
	}
	if g.pending == nil {
		g.pending = &gcWait{done: make(chan struct{})}
	}
	for _, op := range ops {
		op.group.Store(g.pending)
		g.queue = append(g.queue, op)
		g.countQueued(op, 1)
	}
	// A writer gathering its cohort is woken only once the wait is over.
	gathering := g.wantLocks > 0 && g.locksQueued < g.wantLocks && g.upsertsQueued == 0 && len(g.queue) < g.maxBatch
	if !g.started {
		g.started = true
		g.wg.Add(g.slots)
		for range g.slots {
			go g.writer()
		}
	}
	g.mu.Unlock()
	if !gathering {
		g.wake()
	}
	return nil
}

// countQueued counts op's kind in or out of the queue (d = 1 or -1).
func (g *groupCommit) countQueued(op *Op, d int) {
	switch op.kind {
	case opLock:
		g.locksQueued += d
	case opUpsert:
		g.upsertsQueued += d
	}
}

// do queues op and waits until it is committed (or failed). A caller
// whose ctx ends stops waiting; the write may still land.
func (g *groupCommit) do(ctx context.Context, op *Op) (bool, error) {
	if err := g.enqueue(op); err != nil {
		return false, err
	}
	if !g.wait(ctx, op) {
		return false, ctx.Err()
	}
	return op.ok, op.err
}

// wait waits until op is answered; false means ctx ended first.
func (g *groupCommit) wait(ctx context.Context, op *Op) bool {
	cancel := ctx.Done()
	for !op.answered.Load() {
		w := op.group.Load()
		if cancel == nil {
			<-w.done
			continue
		}
		select {
		case <-w.done:
		case <-cancel:
			return op.answered.Load()
		}
	}
	return true
}

// doAsync queues op and returns at once; then is given the answer (on the
// goroutine that wrote the group), and passed to release after it when it
// returns true.
func (g *groupCommit) doAsync(op *Op, then Then) {
	op.then = then
	if err := g.enqueue(op); err != nil {
		if then.Answered(false, err) && g.release != nil {
			g.release([]Then{then})
		}
	}
}

// answerAsync calls the thens of ops and passes those that return true to
// release together, gathered in buf (returned for reuse: release does not
// keep the slice).
func (g *groupCommit) answerAsync(ops []*Op, buf []Then) []Then {
	for _, op := range ops {
		if op.then != nil && op.then.Answered(op.ok, op.err) {
			buf = append(buf, op.then)
		}
	}
	if len(buf) > 0 && g.release != nil {
		g.release(buf)
	}
	clear(buf)
	return buf
}

// replaceLock turns lock, queued by enqueue, into the success delete of
// its job whatever the row's lock (then receives the answer, as with
// doAsync), provided that no writer took the lock yet; it reports whether
// it did. The op keeps its place in the queue, so the jid's later writes
// still follow it.
func (g *groupCommit) replaceLock(lock *Op, then Then) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || lock.taken || lock.kind != opLock || lock.answered.Load() {
		return false
	}
	g.countQueued(lock, -1)
	lock.kind, lock.anyLock, lock.early, lock.then = opDelete, true, false, then
	lock.del = DeleteParams{JobID: lock.lk.JobID, LockedBy: lock.lk.LockedBy, LockedAt: lock.lk.LockedAt}
	return true
}

// waitQueue waits until fewer than n ops are queued, a group at a time:
// the queued ops share the gcWait of the next group, which closes once
// that group is written.
func (g *groupCommit) waitQueue(ctx context.Context, n int) {
	for {
		g.mu.Lock()
		w := g.pending
		if len(g.queue) < n || w == nil || g.closed {
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		select {
		case <-w.done:
		case <-ctx.Done():
			return
		}
	}
}

// doMany queues ops together (they can share one group) and waits until
// each is committed or failed. A caller whose ctx ends gets ctx's error
// for the ops not answered yet (they may still land).
func (g *groupCommit) doMany(ctx context.Context, ops []*Op) (oks []bool, errs []error) {
	oks, errs = make([]bool, len(ops)), make([]error, len(ops))
	if err := g.enqueue(ops...); err != nil {
		for i := range ops {
			errs[i] = err
		}
		return oks, errs
	}
	for i, op := range ops {
		if g.wait(ctx, op) {
			oks[i], errs[i] = op.ok, op.err
		} else {
			errs[i] = ctx.Err()
		}
	}
	return oks, errs
}

func (g *groupCommit) wake() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// take removes the next group from the queue: ops in order, skipping a
// jid already in this group or in one being written (and every later op
// of that jid, to keep their order).
func (g *groupCommit) take() []*Op {
	var batch, rest []*Op
	held := g.held
	defer clear(held)
	// With one writer no group is being written while it takes the next,
	// so inflight is only kept with several.
	several := g.slots > 1
	for i, op := range g.queue {
		if len(batch) >= g.maxBatch {
			// Full: the rest stays queued in order, without looking at
			// each op (the queue can hold many groups' worth).
			rest = append(rest, g.queue[i:]...)
			break
		}
		jid := op.jid()
		if held[jid] || (several && g.inflight[jid] > 0) {
			held[jid] = true
			rest = append(rest, op)
			continue
		}
		held[jid] = true
		op.taken = true
		batch = append(batch, op)
		g.countQueued(op, -1)
	}
	g.queue = rest
	switch {
	case len(batch) == 0: // all held: they keep their gcWait
	case len(rest) == 0:
		g.pending = nil
	default:
		// The batch keeps the current gcWait; the ops left behind wait for
		// a later group.
		g.pending = &gcWait{done: make(chan struct{})}
		for _, op := range rest {
			op.group.Store(g.pending)
		}
	}
	if several {
		for _, op := range batch {
			g.inflight[op.jid()]++
		}
	}
	return batch
}

// writer writes one group after another until close.
func (g *groupCommit) writer() {
	defer g.wg.Done()
	var thens []Then // answerAsync's, reused from group to group
	for {
		batch := g.next()
		if batch == nil {
			return
		}
		thens = g.write(batch, thens[:0])
	}
}

// next waits for a group to write (nil after close, once the queue is
// empty): at once, or within the window when it is set and the group is
// not full yet.
//
// With one writer it first gathers the cohort it has just released. The
// jobs whose locks the last group committed start running when it is
// answered, and a no-op or short job asks for its next job's lock a few
// hundred microseconds later. Written at once, the next group holds only
// the locks that queued while the last one was written, and the slots
// settle into two cohorts that alternate, about half the slots per
// group, each group paying the statement's (and the commit's) fixed
// cost. So the writer waits until the queue holds as many locks as the
// last group had plus those already queued, or for as long as the last
// group took to write (at most gather), whichever comes first; an upsert
// in the queue (a push waits for it) or a full group ends the wait. When
// the time runs out first, the jobs take longer than a group, and the wait
// would only delay the locks already queued: the next group (then 2, 4, up
// to gcGatherMaxSkip after each miss in a row) is written without one. A
// lock that arrives during the wait waits for the rest of it and then its
// own group: no longer than, without the wait, a lock that arrives just
// after a group began waits (the rest of that group, then its own). The
// wait ends when its cohort is back, and the groups then hold every slot's
// lock: one statement (and one commit) per job cycle instead of two.
func (g *groupCommit) next() []*Op {
	var lingerUntil, gatherUntil time.Time
	want := -1 // the queued locks to gather; computed on the first pass
	for {
		g.mu.Lock()
		n := len(g.queue)
		closed := g.closed
		if want < 0 {
			want = 0
			switch {
			case g.gather <= 0 || g.slots > 1 || g.lastLocks == 0:
			case 2*g.lastEarly >= g.lastLocks:
				// The last group's locks were mostly taken ahead
				// (Op.early): the slots' next locks are queued while a
				// group is written, not after it, so there is no cohort
				// to wait for, and the next group goes now, while the
				// jobs it released run.
			case g.gatherSkip > 0:
				g.gatherSkip--
			default:
				want = g.lastLocks + g.locksQueued
				gatherUntil = time.Now().Add(min(g.lastWrite, g.gather))
			}
		}
		gathering := want > 0 && g.locksQueued < want && g.upsertsQueued == 0 && n < g.maxBatch && !closed
		if gathering && !time.Now().Before(gatherUntil) {
			// The cohort did not come back in time: its jobs take longer
			// than a group, and waiting for them only delays the others.
			// Skip the next gathers, twice as many after each miss in a row.
			gathering = false
			g.gatherMissed = min(max(2*g.gatherMissed, 1), gcGatherMaxSkip)
			g.gatherSkip = g.gatherMissed
			want = 0
		} else if want > 0 && !gathering && g.locksQueued >= want {
			g.gatherMissed = 0
			want = 0
		}
		if gathering {
			g.wantLocks = want
		} else {
			g.wantLocks = 0
		}
		lingered := !lingerUntil.IsZero() && !time.Now().Before(lingerUntil)
		if n > 0 && !gathering && (g.window <= 0 || n >= g.maxBatch || closed || lingered) {
			if batch := g.take(); len(batch) > 0 {
				more := len(g.queue) > 0
				g.mu.Unlock()
				if more {
					g.wake() // for another writer, if there is one
				}
				return batch
			}
		}
		g.mu.Unlock()
		if closed && n == 0 {
			return nil
		}
		stop := g.stop
		if closed {
			stop = nil // already seen; wait for the groups being written
		}
		var timer *time.Timer
		var fire <-chan time.Time
		if n > 0 && g.window > 0 && !lingered {
			if lingerUntil.IsZero() {
				lingerUntil = time.Now().Add(g.window)
			}
			timer = time.NewTimer(time.Until(lingerUntil))
			fire = timer.C
		}
		if gathering && (timer == nil || gatherUntil.Before(lingerUntil)) {
			if timer != nil {
				timer.Stop()
			}
			timer = time.NewTimer(time.Until(gatherUntil))
			fire = timer.C
		}
		select {
		case <-g.kick:
		case <-fire:
		case <-stop:
			g.mu.Lock()
			g.closed = true
			g.mu.Unlock()
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// write applies one group and answers its callers. A group the database
// refused with an SQL error (not a connection error) is retried op by op,
// so that one bad row fails only its own write.
func (g *groupCommit) write(batch []*Op, thens []Then) []Then {
	ctx := context.Background()
	start := time.Now()
	err := g.apply(ctx, batch)
	took := time.Since(start)
	if err != nil && len(batch) > 1 && !g.isConn(err) {
		for _, op := range batch {
			op.err = g.single(ctx, []*Op{op})
		}
	} else if err != nil {
		for _, op := range batch {
			op.ok, op.err = false, err
		}
	}
	g.mu.Lock()
	g.lastWrite = took
	g.lastLocks, g.lastEarly = 0, 0
	if err == nil {
		for _, op := range batch {
			if op.kind == opLock {
				g.lastLocks++
				if op.early {
					g.lastEarly++
				}
			}
		}
	}
	if g.slots > 1 {
		for _, op := range batch {
			if g.inflight[op.jid()]--; g.inflight[op.jid()] <= 0 {
				delete(g.inflight, op.jid())
			}
		}
	}
	more := len(g.queue) > 0
	g.mu.Unlock()
	if more && g.slots > 1 {
		g.wake() // writes held for this group's jids may go now
	}
	for _, op := range batch {
		op.answered.Store(true)
	}
	if len(batch) > 0 {
		close(batch[0].group.Load().done) // the whole group's (take)
	}
	return g.answerAsync(batch, thens)
}

// close writes what is queued, waits for the groups being written, and
// refuses later writes.
func (g *groupCommit) close() {
	g.mu.Lock()
	if g.closed && !g.started {
		g.mu.Unlock()
		return
	}
	started := g.started
	g.closed = true
	g.mu.Unlock()
	if started {
		close(g.stop)
		g.wg.Wait()
	}
	// Anything queued after the writers left fails.
	g.mu.Lock()
	left, w := g.queue, g.pending
	g.queue, g.pending = nil, nil
	g.mu.Unlock()
	for _, op := range left {
		op.err = errGroupClosed
		op.answered.Store(true)
	}
	if w != nil {
		close(w.done)
	}
	g.answerAsync(left, nil)
}
