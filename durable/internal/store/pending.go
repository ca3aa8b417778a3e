package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/internal/monoclock"
)

// ErrPendingWrites reports that writes finishing jobs' rows were still
// waiting for their database when Pending stopped.
var ErrPendingWrites = errors.New("durable: row writes still pending")

// Backoff of the retries of a database that does not answer, by default.
const (
	pendingRetryMin = time.Second
	pendingRetryMax = 30 * time.Second
)

// PendingKind is the write a PendingWrite retries.
type PendingKind uint8

const (
	// PendingDelete is the success delete (deleteLocked): the row of a
	// completed job, if it still holds the middleware's lock.
	PendingDelete PendingKind = iota + 1
	// PendingUnlock is the failure unlock with the error record (unlock),
	// if the row still holds the middleware's lock.
	PendingUnlock
	// PendingRemove deletes the row whatever its state (deleteJob): a stale
	// copy left by a push again into another database, or the row of a job
	// that completed while its database did not answer the lock.
	PendingRemove
)

func (k PendingKind) String() string {
	switch k {
	case PendingDelete:
		return "delete"
	case PendingUnlock:
		return "unlock"
	case PendingRemove:
		return "remove"
	}
	return "unknown"
}

// PendingWrite is a write that finishes a job's row and failed because
// its database did not answer.
type PendingWrite struct {
	Store  Store
	JID    string
	Kind   PendingKind
	Delete DeleteParams // PendingDelete
	Unlock UnlockParams // PendingUnlock
	// Done, when set, is called once the write leaves the queue (applied,
	// refused, replaced, or dropped): the durable server middleware holds
	// the acknowledgement of a completed job until then, so that with
	// reliable fetch the job stays recoverable in its in-progress list
	// while its row delete waits for the database.
	Done func()

	queuedAt time.Time
	seq      uint64
}

// finish calls Done once.
func (w *PendingWrite) finish() {
	if w != nil && w.Done != nil {
		f := w.Done
		w.Done = nil
		f()
	}
}

func (w *PendingWrite) key() pendingKey { return pendingKey{w.Store, w.JID} }

func (w *PendingWrite) apply(ctx context.Context) error {
	var err error
	switch w.Kind {
	case PendingDelete:
		_, err = w.Store.DeleteLocked(ctx, w.Delete)
	case PendingUnlock:
		_, err = w.Store.Unlock(ctx, w.Unlock)
	case PendingRemove:
		_, err = w.Store.DeleteJob(ctx, w.JID)
	default:
		err = fmt.Errorf("durable: unknown pending write %d", w.Kind)
	}
	return err
}

// pendingKey is one row: a jid in one database. A later write of the same
// key replaces the pending one.
type pendingKey struct {
	st  Store
	jid string
}

// storeBackoff is when a database's writes are tried next.
type storeBackoff struct {
	next  time.Time
	delay time.Duration
}

// Pending keeps the writes that finish jobs' rows (success delete,
// failure unlock, stale copy removal) whose database did not answer, and
// retries them in the background with a backoff per database until it
// answers. One write is kept per row (jid and database): a later write
// replaces an earlier one, except that a removal (the row is a stale copy)
// is only cancelled by a push that writes the row again. Every write of
// this process to a jid (a push, a lock) first applies that jid's pending
// writes, under a lock per jid, so that they land in order.
type Pending struct {
	log      zerolog.Logger
	clock    clock.Clock
	max      int
	minDelay time.Duration
	maxDelay time.Duration

	mu      sync.Mutex
	writes  map[pendingKey]*PendingWrite
	seq     uint64
	backoff map[Store]*storeBackoff
	empty   chan struct{} // closed while nothing is pending
	started bool
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{}
	wake    chan struct{}

	count   atomic.Int64 // len(writes), read without mu on the hot paths
	seed    maphash.Seed
	stripes [64]sync.Mutex // per jid: a pending write and later writes of its jid
}

// PendingConfig configures a Pending.
type PendingConfig struct {
	Log   zerolog.Logger
	Clock clock.Clock
	// Max bounds the writes kept; beyond it a write is dropped and logged.
	Max int
	// MinDelay and MaxDelay bound the backoff (default 1 s and 30 s).
	MinDelay, MaxDelay time.Duration
}

// NewPending returns an empty queue; its retry loop starts with the first
// write queued.
func NewPending(c PendingConfig) *Pending {
	empty := make(chan struct{})
	close(empty)
	minDelay := cmp.Or(c.MinDelay, pendingRetryMin)
	return &Pending{
		log:      c.Log,
		clock:    monoclock.Or(c.Clock),
		max:      c.Max,
		minDelay: minDelay,
		maxDelay: max(cmp.Or(c.MaxDelay, pendingRetryMax), minDelay),
		writes:   map[pendingKey]*PendingWrite{},
		backoff:  map[Store]*storeBackoff{},
		empty:    empty,
		wake:     make(chan struct{}, 1),
		seed:     maphash.MakeSeed(),
	}
}

func (p *Pending) stripe(jid string) *sync.Mutex {
	return &p.stripes[maphash.String(p.seed, jid)%uint64(len(p.stripes))]
}

func (p *Pending) logWrite(e *zerolog.Event, w *PendingWrite) *zerolog.Event {
	return e.Str("component", "durable").Str("database", w.Store.Name()).Str("jid", w.JID).Str("write", w.Kind.String())
}

// Add queues a write whose database did not answer, replacing a pending
// write of the same row. When the queue is full or stopped, the write is
// dropped and logged at error level.
func (p *Pending) Add(w *PendingWrite) {
	w.queuedAt = p.clock.Now()
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		p.logWrite(p.log.Error(), w).Msg("durable row write failed after shutdown and is not retried; the reconciler may report the job as lost")
		w.finish()
		return
	}
	k := w.key()
	if old := p.writes[k]; old != nil && old.Kind == PendingRemove && w.Kind != PendingRemove {
		// The row is a stale copy: deleting it stays right whatever the job
		// did since; only a push that rewrites the row cancels the removal.
		p.mu.Unlock()
		w.finish()
		return
	}
	if p.writes[k] == nil && len(p.writes) >= p.max {
		p.mu.Unlock()
		p.logWrite(p.log.Error(), w).Int("max_pending_writes", p.max).
			Msg("too many durable row writes pending; dropped this one, the reconciler may report the job as lost")
		w.finish()
		return
	}
	if len(p.writes) == 0 {
		p.empty = make(chan struct{})
	}
	p.seq++
	w.seq = p.seq
	if p.writes[k] == nil {
		p.count.Add(1)
	}
	replaced := p.writes[k]
	p.writes[k] = w
	if p.backoff[w.Store] == nil {
		p.backoff[w.Store] = &storeBackoff{next: time.Now().Add(p.minDelay), delay: p.minDelay}
	}
	if !p.started {
		p.started = true
		ctx, cancel := context.WithCancel(context.Background())
		p.cancel, p.done = cancel, make(chan struct{})
		go p.loop(ctx)
	}
	p.mu.Unlock()
	replaced.finish()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// removeLocked forgets a write; p.mu is held.
func (p *Pending) removeLocked(w *PendingWrite) {
	k := w.key()
	if p.writes[k] != w {
		return
	}
	delete(p.writes, k)
	p.count.Add(-1)
	if len(p.writes) == 0 {
		close(p.empty)
	}
}

// Get returns the pending write of a row, or nil.
func (p *Pending) Get(st Store, jid string) *PendingWrite {
	if p.count.Load() == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.writes[pendingKey{st, jid}]
}

// Len returns the number of pending writes.
func (p *Pending) Len() int { return int(p.count.Load()) }

// Emptied returns a channel closed while nothing is pending.
func (p *Pending) Emptied() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.empty
}

// attempt runs a pending write once, unless it was replaced or applied
// meanwhile. It reports whether the database did not answer (the write is
// kept). A write the database refuses with an SQL error is dropped and
// logged: retrying it cannot help. stripeHeld is true when the caller
// Holds the jid's lock.
func (p *Pending) attempt(ctx context.Context, w *PendingWrite, stripeHeld bool) (unreachable bool) {
	if !stripeHeld {
		m := p.stripe(w.JID)
		m.Lock()
		defer m.Unlock()
	}
	p.mu.Lock()
	current := p.writes[w.key()] == w
	p.mu.Unlock()
	if !current {
		return false
	}
	err := w.apply(ctx)
	if err != nil && (ctx.Err() != nil || w.Store.IsConnError(err)) {
		return true
	}
	p.mu.Lock()
	p.removeLocked(w)
	p.mu.Unlock()
	w.finish()
	if err != nil {
		p.logWrite(p.log.Error().Err(err), w).Msg("pending durable row write refused by the database; dropped")
		return false
	}
	p.logWrite(p.log.Info(), w).Time("queued_at", w.queuedAt).Msg("pending durable row write applied: the database answers again")
	return false
}

// Settle applies the pending writes of jid before this process writes the
// jid again (a push, a lock) and returns the function that releases the
// jid's lock once that write is done. It costs nothing when nothing is
// pending.
func (p *Pending) Settle(ctx context.Context, jid string, stores []Store) (release func()) {
	if p.count.Load() == 0 {
		return func() {}
	}
	var ws []*PendingWrite
	p.mu.Lock()
	for _, st := range stores {
		if w := p.writes[pendingKey{st, jid}]; w != nil {
			ws = append(ws, w)
		}
	}
	p.mu.Unlock()
	if len(ws) == 0 {
		return func() {}
	}
	m := p.stripe(jid)
	m.Lock()
	for _, w := range ws {
		p.attempt(ctx, w, true)
	}
	return m.Unlock
}

// Supersede forgets the pending write of a row that a push has just
// written again (the caller holds the jid's lock from Settle), and returns
// its kind (0 when there was none).
func (p *Pending) Supersede(st Store, jid string) PendingKind {
	if p.count.Load() == 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.writes[pendingKey{st, jid}]
	if w == nil {
		return 0
	}
	p.removeLocked(w)
	defer w.finish() // after the unlock (deferred calls run in reverse)
	return w.Kind
}

// Holds reports whether this process holds a pending write for the row,
// after trying it once more. The reconciler leaves such a row alone: the
// job finished here, its database just did not hear of it yet.
func (p *Pending) Holds(ctx context.Context, st Store, jid string) bool {
	w := p.Get(st, jid)
	if w == nil {
		return false
	}
	p.attempt(ctx, w, false)
	return true
}

// snapshot returns the pending writes of st (all databases when nil),
// oldest first.
func (p *Pending) snapshot(st Store) []*PendingWrite {
	p.mu.Lock()
	out := make([]*PendingWrite, 0, len(p.writes))
	for _, w := range p.writes {
		if st == nil || w.Store == st {
			out = append(out, w)
		}
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b *PendingWrite) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

// pendingRound is what one retry of the queue did.
type pendingRound struct {
	// Applied writes landed (or were refused and dropped).
	Applied int
	// Unreachable lists the databases that still did not answer.
	Unreachable []Store
}

// retryStore tries st's pending writes in order and stops at the first
// that finds the database still unreachable.
func (p *Pending) retryStore(ctx context.Context, st Store, res *pendingRound) {
	for _, w := range p.snapshot(st) {
		if ctx.Err() != nil {
			res.Unreachable = append(res.Unreachable, st)
			return
		}
		if p.attempt(ctx, w, false) {
			res.Unreachable = append(res.Unreachable, st)
			return
		}
		res.Applied++
	}
}

// runOnce tries every pending write once, database by database.
func (p *Pending) runOnce(ctx context.Context) *pendingRound {
	res := &pendingRound{}
	var stores []Store
	for _, w := range p.snapshot(nil) {
		if !slices.Contains(stores, w.Store) {
			stores = append(stores, w.Store)
		}
	}
	for _, st := range stores {
		p.retryStore(ctx, st, res)
	}
	return res
}

// loop retries each database's writes when its backoff is due. It waits
// in real time (time.Now), not on the injected clock, which tests fake.
func (p *Pending) loop(ctx context.Context) {
	defer close(p.done)
	for {
		var timer *time.Timer
		var fire <-chan time.Time
		if wait, ok := p.nextWait(); ok {
			timer = time.NewTimer(wait)
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case <-p.wake:
			if timer != nil {
				timer.Stop()
			}
			continue
		case <-fire:
		}
		for _, st := range p.dueStores() {
			res := &pendingRound{}
			p.retryStore(ctx, st, res)
			if ctx.Err() != nil {
				return
			}
			p.reschedule(st, len(res.Unreachable) == 0)
		}
	}
}

// nextWait is the time until the earliest database is due.
func (p *Pending) nextWait() (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var next time.Time
	for _, b := range p.backoff {
		if next.IsZero() || b.next.Before(next) {
			next = b.next
		}
	}
	if next.IsZero() {
		return 0, false
	}
	return max(time.Until(next), 0), true
}

func (p *Pending) dueStores() []Store {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	var out []Store
	for st, b := range p.backoff {
		if !b.next.After(now) {
			out = append(out, st)
		}
	}
	return out
}

// reschedule sets st's next retry: none when it has nothing pending, the
// minimum delay after it answered (writes queued during the round), else
// the doubled delay (up to the maximum) with ±20% jitter.
func (p *Pending) reschedule(st Store, answered bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	has := false
	for k := range p.writes {
		if k.st == st {
			has = true
			break
		}
	}
	b := p.backoff[st]
	switch {
	case !has:
		delete(p.backoff, st)
		return
	case b == nil:
		b = &storeBackoff{delay: p.minDelay}
		p.backoff[st] = b
	case answered:
		b.delay = p.minDelay
	default:
		b.delay = min(2*b.delay, p.maxDelay)
	}
	jitter := time.Duration(float64(b.delay) * (0.8 + 0.4*rand.Float64()))
	b.next = time.Now().Add(jitter)
}

// Stop ends the loop, tries the queue once more within ctx and logs each
// write still pending at error level. Later failed writes are logged, not
// queued.
func (p *Pending) Stop(ctx context.Context) error {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return nil
	}
	p.stopped = true
	cancel, done := p.cancel, p.done
	p.mu.Unlock()
	if cancel != nil {
		cancel()
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	p.runOnce(ctx)
	left := p.snapshot(nil)
	p.mu.Lock()
	for _, w := range left {
		p.removeLocked(w)
	}
	p.mu.Unlock()
	for _, w := range left {
		e := p.logWrite(p.log.Error(), w).Time("queued_at", w.queuedAt)
		switch w.Kind {
		case PendingUnlock:
			e.Msg("durable row write still pending at shutdown: the failed job's row keeps its lock and lacks the error")
		case PendingDelete:
			// Its job's acknowledgement stays held (done is not called): with
			// reliable fetch the job is still in its in-progress list, which
			// the fetch gives back to its queue at close, so it runs again
			// and deletes its row then.
			e.Msg("durable row write still pending at shutdown: with reliable fetch the job runs again and deletes its row; otherwise delete this row, or the reconciler will report the finished job as lost")
		default:
			e.Msg("durable row write still pending at shutdown: delete this row, or the reconciler will report the finished job as lost")
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("durable: %d row writes left: %w", len(left), ErrPendingWrites)
	}
	return nil
}
