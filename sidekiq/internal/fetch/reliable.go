package fetch

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/procstat"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
	"github.com/gojob/gojob/sidekiq/wire"
)

// The reliable fetch keeps every job it takes in Redis until the job's
// outcome is written. A job moves atomically from queue:<q> into one of
// its slot's in-progress lists (LMOVE; RPOPLPUSH before Redis 6.2), with
// its bytes unchanged, and leaves it with its acknowledgement (LTRIM by
// position, or LREM by value: lists.go) or, in one script, with its retry
// or dead entry. When the process dies, the lists outlive it, and a live
// process pushes their jobs back (recovery.go).
//
// Takers. Two taker goroutines share the idle slots (one token per idle
// slot). A taker gathers the tokens free now (and, while the queues have
// work, those freed within gatherFor, up to half the slots) and sends, in
// one write, the acknowledgements queued meanwhile and one move per slot,
// each from the queue the fetch order gives (wake.go). Every command is
// one of Redis's own, so no job's bytes pass through a script. A taker
// never moves more jobs than it holds tokens for, so a crash exposes
// nothing that was not about to run; while the slots run one batch, the
// other taker's is on its way. When every queue is believed empty, the
// takers park until a waker sees a job.

var (
	//go:embed lua/reliable_finish.lua
	finishSrc string
	//go:embed lua/reliable_requeue.lua
	requeueSrc string
	//go:embed lua/reliable_recover.lua
	recoverSrc string

	finishScript  = redis.NewScript(2, finishSrc)
	requeueScript = redis.NewScript(2, requeueSrc)
	recoverScript = redis.NewScript(7, recoverSrc)
)

// heartbeatInterval is how often the reliable-fetch heartbeats are
// renewed; they expire after wire.HeartbeatTTL (60 s), so a live process
// misses five renewals before it could be taken for dead.
const heartbeatInterval = 10 * time.Second

// takers is how many goroutines take batches at once, each on its own
// connection: while the workers run one batch the next is on its way (a
// third only adds contention on 2 cores).
const takers = 2

// reliableFetch is the reliable fetch.
type reliableFetch struct {
	cfg *Config
	// moveOK: Redis has LMOVE/BLMOVE (6.2+).
	moveOK bool
	ids    *idents
	queues *queues
	idle   chan int // one token per idle slot: its index
	// gatherers are the takers' gathering states, which the workers look
	// at when they free a slot.
	gatherers [takers]gathering
	slots     []*slotState
	acker     *acker
	life      *reliableLife
	wg        sync.WaitGroup // takers and workers
	// drops counts failed round trips: a move among them may have put a
	// job in a list that no mirror knows.
	drops atomic.Int64
	// taking is, per taker, since when its round has been on its way
	// (unix nanoseconds; 0 when none): the jobs it moves are nobody's
	// orphans until they reach their slots.
	taking [takers]atomic.Int64
	// aheadMaxRun, aheadHold and aheadDepth are the limits of fetching
	// ahead (ahead.go), fields so that tests can change them.
	aheadMaxRun, aheadHold time.Duration
	aheadDepth             int
}

// NewReliable returns the reliable fetch. It writes the process's
// reliable-fetch heartbeat before it returns; through a Redis outage it
// retries until ctx ends.
func NewReliable(ctx context.Context, cfg *Config) (Fetcher, error) {
	if cfg.Identity == "" {
		return nil, errors.New("sidekiq: reliable fetch needs the process identity")
	}
	if _, _, ok := wire.ParseWorkingListKey(wire.WorkingListKey("q", cfg.Identity)); !ok {
		return nil, fmt.Errorf("sidekiq: reliable fetch: identity %q is not host:pid:hex", cfg.Identity)
	}
	n := cfg.Concurrency
	f := &reliableFetch{
		cfg: cfg, ids: newIdents(cfg.Identity), idle: make(chan int, n),
		aheadMaxRun: aheadMaxRun, aheadHold: aheadHold, aheadDepth: aheadDepth,
	}
	writes := &redisx.Retrier{Pool: cfg.Pool, Ctx: ctx, Outage: cfg.Outage}
	var err error
	if f.moveOK, err = probeLMOVE(writes); err != nil {
		return nil, err
	}
	f.queues = newQueues(cfg, f.moveOK)
	for i := range f.gatherers {
		f.gatherers[i].init(gatherFor)
	}
	f.slots = make([]*slotState, n)
	for i := range f.slots {
		f.slots[i] = newSlotState(i)
	}
	f.life = newReliableLife(cfg, f.ids)
	f.acker = newAcker(cfg, f)
	f.acker.hold = rideHold
	f.life.holders = f.held
	f.life.inUse = f.inUse
	f.life.dropped = f.drops.Load
	f.life.waitingSince = f.oldestWait
	if err := f.life.start(writes); err != nil {
		return nil, err
	}
	return f, nil
}

// probeLMOVE asks Redis whether it knows LMOVE (6.2+), loads the scripts,
// and reports a Redis that cannot be reached.
func probeLMOVE(writes *redisx.Retrier) (bool, error) {
	var ok bool
	err := writes.Do(func(conn redis.Conn) error {
		_, err := conn.Do("LMOVE", "gojob-probe-absent", "gojob-probe-absent", "RIGHT", "LEFT")
		var re redis.Error
		switch {
		case err == nil:
			ok = true
		case errors.As(err, &re) && isRefused(re):
			ok = false
		default:
			return err
		}
		return loadScripts(conn)
	})
	if err != nil {
		return false, fmt.Errorf("sidekiq: reliable fetch setup: %w", err)
	}
	return ok, nil
}

// loadScripts loads the fetch's scripts into Redis's script cache.
func loadScripts(conn redis.Conn) error {
	for _, s := range []*redis.Script{finishScript, requeueScript, recoverScript} {
		if err := s.Load(conn); err != nil {
			return err
		}
	}
	return nil
}

// Start starts the workers, the takers, the wakers and the acknowledger.
func (f *reliableFetch) Start() {
	for i := 0; i < f.cfg.Concurrency; i++ {
		f.wg.Add(1)
		go f.worker(f.slots[i])
	}
	f.queues.start()
	var running sync.WaitGroup
	running.Add(takers)
	for i := range takers {
		go func() {
			defer running.Done()
			f.taker(&f.taking[i], &f.gatherers[i], uint64(i))
		}()
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		running.Wait()
		f.queues.stop()
		for _, s := range f.slots {
			close(s.jobs)
		}
	}()
	f.acker.start()
}

// Wait blocks until the workers are done and their acknowledgements sent.
func (f *reliableFetch) Wait() {
	f.wg.Wait()
	f.acker.close()
}

// Depth is 0: the reliable fetch pipelines no blocking commands.
func (f *reliableFetch) Depth() int { return 0 }

// held lists the jobs the slots hold, by list.
func (f *reliableFetch) held() map[string]map[string]int {
	in := map[string]map[string]int{}
	for _, s := range f.slots {
		s.heldIn(in)
	}
	return in
}

// inUse lists the identities a slot uses or holds jobs in.
func (f *reliableFetch) inUse() map[*listIdent]bool {
	in := map[*listIdent]bool{}
	for _, s := range f.slots {
		s.uses(in)
	}
	return in
}

// oldestWait returns since when the round or acknowledgement that has
// waited longest has been on its way (0 when none is).
func (f *reliableFetch) oldestWait() int64 {
	oldest := f.acker.waitingSince()
	for i := range f.taking {
		oldest = earliest(oldest, f.taking[i].Load())
	}
	return oldest
}

// move is one slot's move in a round.
type move struct {
	slot *slotState
	q    *queueState
	seen uint64 // q.seen when picked
	sl   *slotList
	// setup: the round writes the identity's heartbeat and registers the
	// list before the move.
	hb, reg bool
	// The outcome, once read: raw is the job moved (nil: the queue was
	// empty), err an error reply.
	done bool
	raw  []byte
	err  error
}

// round is a batch of moves, with the acknowledgements riding ahead of
// them.
type round struct {
	acks  []ack
	moves []move
}

// planMove fills m with a move for slot s from the queue the fetch order
// gives; false when every queue is believed empty (or paused).
func (f *reliableFetch) planMove(m *move, s *slotState, r *rand.Rand) bool {
	q, seen := f.queues.pick(r)
	if q == nil {
		return false
	}
	sl := s.list(f.ids, q.key)
	*m = move{slot: s, q: q, seen: seen, sl: sl}
	f.ids.mu.Lock()
	m.reg = sl.ident.lists[q.key] == ""
	m.hb = !sl.ident.created
	f.ids.mu.Unlock()
	return true
}

// send writes a round (the acknowledgements, then each move with the
// setup of a new list before it) in one write and reads the replies,
// recording each moved job in its slot's mirror. It returns the first
// error: a connection error leaves the moves not marked done unknown (the
// round failed: failedRound); an error reply (a queue key that is not a
// list, say) is only the move's, and an acknowledgement Redis refused goes
// again by value. Every reply is read either way.
func (f *reliableFetch) send(c redis.Conn, rd *round) error {
	corked := redisx.Cork(c)
	for i := range rd.acks {
		rd.acks[i].send(c)
	}
	for _, m := range rd.moves {
		if m.hb {
			c.Send("SET", m.sl.ident.hbKey, f.life.hbValue, "EX", wire.HeartbeatTTL)
		}
		if m.reg {
			c.Send("SADD", wire.KeyWorkingLists, m.sl.key)
		}
		if f.moveOK {
			c.Send("LMOVE", m.sl.move...)
		} else {
			c.Send("RPOPLPUSH", m.sl.rpl...)
		}
	}
	t := time.AfterFunc(stallAfter, func() { f.cfg.Outage.Stalled(stallAfter) })
	defer t.Stop()
	err := c.Flush()
	if corked != nil {
		if uerr := corked.Uncork(); err == nil {
			err = uerr
		}
	}
	if err != nil {
		return err
	}
	var replyErr error
	var refused []ack
	for i := range rd.acks {
		v, err := receiveReply(c)
		if err != nil {
			return err // failedRound resends them all: one that ran finds nothing
		}
		if e, ok := v.(redis.Error); ok {
			// Not run (READONLY after a failover, LOADING): again by
			// value, through the retrier, once the round is read.
			refused = append(refused, rd.acks[i])
			if replyErr == nil {
				replyErr = e
			}
		}
		rd.acks[i].checked(f, v)
	}
	rd.acks = rd.acks[:0]
	if len(refused) > 0 {
		defer f.acker.resend(refused)
	}
	for i := range rd.moves {
		m := &rd.moves[i]
		setup := true
		for range btoi(m.hb) + btoi(m.reg) {
			v, err := receiveReply(c)
			if err != nil {
				return err
			}
			if e, ok := v.(redis.Error); ok {
				setup = false
				if replyErr == nil {
					replyErr = e
				}
			}
		}
		if (m.hb || m.reg) && setup {
			f.ids.mu.Lock()
			m.sl.ident.created = true
			m.sl.ident.lists[m.q.key] = m.sl.key
			f.ids.mu.Unlock()
		}
		v, err := receiveReply(c)
		if err != nil {
			return err
		}
		m.done = true
		switch v := v.(type) {
		case []byte:
			m.raw = v
		case nil:
			m.q.markEmpty(m.seen)
		case redis.Error:
			m.err = v
			if replyErr == nil {
				replyErr = v
			}
		}
	}
	return replyErr
}

// receiveReply reads one reply of a pipeline, an error reply as a value
// (redis.Error) rather than as the error: every reply of a round is read,
// whatever some of them say, so that the next round's replies are its
// own. The error is the connection's.
func receiveReply(c redis.Conn) (any, error) {
	v, err := c.Receive()
	var re redis.Error
	if errors.As(err, &re) {
		return re, nil
	}
	return v, err
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// unit records a moved job in its slot's mirror and returns its unit.
func (f *reliableFetch) unit(m *move) Unit {
	h := m.slot.moved(m.sl, m.raw)
	return Unit{Queue: m.q.name, Raw: m.raw, list: m.sl.key, held: h, slot: m.slot}
}

// taker is one taker goroutine. The takers share the idle-slot tokens:
// each moves at most one job per token it holds, into that slot's list,
// and hands the job to the slot.
func (f *reliableFetch) taker(taking *atomic.Int64, g *gathering, seed uint64) {
	cfg := f.cfg
	r := NewRand(seed)
	fc := &conn{cfg: cfg}
	defer fc.close()
	var slots []int
	rd := &round{}
	full := false // the last round moved a job for every slot it had
	defer taking.Store(0)
	for {
		taking.Store(0)
		if !f.waitTakeable() {
			return
		}
		slots = slots[:0]
		select {
		case i := <-f.idle:
			slots = append(slots, i)
		case <-cfg.Quiet:
			return
		}
		slots = f.gather(g, full, slots)
		taking.Store(time.Now().UnixNano())
		if cfg.quiet() || !fc.ready() {
			f.giveBack(slots)
			return
		}
		rd.moves = rd.moves[:0]
		for _, i := range slots {
			var m move
			if f.planMove(&m, f.slots[i], r) {
				rd.moves = append(rd.moves, m)
			} else {
				f.idle <- i
			}
		}
		if len(rd.moves) == 0 {
			taking.Store(0)
			if !f.park() {
				return
			}
			continue
		}
		rd.acks = f.acker.steal(rd.acks[:0], rideMax, taking)
		err := f.send(fc.c, rd)
		got := 0
		for i := range rd.moves {
			m := &rd.moves[i]
			switch {
			case m.raw != nil:
				got++
				f.deliver(m)
			case m.done || err == nil:
				f.idle <- m.slot.i
			}
		}
		if err != nil && !isReply(err) {
			taking.Store(0)
			f.failedRound(rd) // resends the acknowledgements by value
			clear(rd.moves)
			if !fc.failed(err) {
				return
			}
			continue
		}
		clear(rd.acks)
		clear(rd.moves)
		if err != nil {
			// An error reply (a queue key that is not a list, say) backs
			// off as an outage does, instead of spinning. A refusal of a
			// Redis that is loading or no longer the master (READONLY
			// after a failover) drops the connection: the next one is
			// dialled to the master of the moment.
			cfg.Health.failed(err)
			if redisx.IsTransient(err) {
				fc.close()
			}
			if !cfg.sleepOrQuiet(time.Second) {
				return
			}
			continue
		}
		fc.ok()
		full = got == len(slots)
	}
}

// isReply reports whether err is an error reply of Redis (the connection
// is fine).
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// deliver hands a moved job to its slot (or back to its queue when the
// server went quiet meanwhile).
func (f *reliableFetch) deliver(m *move) {
	u := f.unit(m)
	if f.cfg.quiet() {
		f.Requeue([]Unit{u})
		f.idle <- m.slot.i
		return
	}
	m.slot.jobs <- u
}

// failedRound handles a round whose connection failed: the epoch ends (a
// move or an acknowledgement may have run unseen), the acknowledgements go
// again by value, and the slots whose moves were not read get their tokens
// back.
func (f *reliableFetch) failedRound(rd *round) {
	f.drops.Add(1)
	f.ids.bump()
	f.acker.resend(rd.acks)
	clear(rd.acks)
	for _, m := range rd.moves {
		if !m.done {
			f.idle <- m.slot.i
		}
	}
}

// waitTakeable waits out a pause of every queue, and heartbeats not
// confirmed for positionFresh (an outage, or a renewal that found them
// gone: this process may have been taken for dead). It reports false
// when the server went quiet.
func (f *reliableFetch) waitTakeable() bool {
	for {
		if !f.cfg.Order.WaitUnpaused(f.cfg.Quiet) {
			return false
		}
		if f.ids.fresh() {
			return true
		}
		if !f.cfg.sleepOrQuiet(pausePoll) {
			return false
		}
	}
}

// park waits until a waker sees a job (or a while, for a queue unpaused
// meanwhile), or the server goes quiet (false).
func (f *reliableFetch) park() bool {
	woken := f.queues.wokeChan()
	t := time.NewTimer(pausePoll)
	defer t.Stop()
	select {
	case <-woken:
	case <-t.C:
	case <-f.cfg.Quiet:
		return false
	}
	return true
}

// giveBack returns slot tokens.
func (f *reliableFetch) giveBack(slots []int) {
	for _, i := range slots {
		f.idle <- i
	}
}

// gatherFor is how long a taker waits for more idle slots when the last
// round found work waiting: a round costs about the same for one job as
// for twenty, so fuller rounds cost far less per job.
const gatherFor = 100 * time.Microsecond

// gathering is a taker's state across its gathers.
type gathering struct {
	// want is how many more tokens the taker waits for (0: it does not
	// wait); the worker whose token makes that many signals enough.
	want   atomic.Int32
	enough chan struct{} // capacity 1
	window time.Duration // gatherFor
	timer  *time.Timer   // the window, reused
}

func (g *gathering) init(window time.Duration) {
	g.enough = make(chan struct{}, 1)
	g.window = window
	g.timer = time.NewTimer(time.Hour)
	g.timer.Stop()
}

// gather takes further idle-slot tokens: those free now and, when the
// queues had work at the last round (busy), those freed within gatherFor,
// up to half the slots. It returns slots with them appended.
//
// It does not wake for each token: it tells the workers how many it waits
// for (want), and the worker whose token makes that many wakes it
// (enough), so that a taker is parked and readied once per round, not
// once per job.
func (f *reliableFetch) gather(g *gathering, busy bool, slots []int) []int {
	target := f.cfg.Concurrency / 2
	max := f.cfg.Concurrency
	armed := false
	defer func() {
		if armed {
			g.want.Store(0)
			g.timer.Stop()
		}
	}()
	for {
		slots = f.takeIdle(slots, max)
		if !busy || len(slots) >= target || len(slots) >= max {
			return slots
		}
		if !armed {
			armed = true
			g.timer.Reset(g.window)
		}
		// Set want before looking again: a worker that adds a token after
		// the look sees want and signals.
		g.want.Store(int32(target - len(slots)))
		if len(f.idle) >= target-len(slots) {
			continue
		}
		select {
		case <-g.enough:
		case <-g.timer.C:
			return f.takeIdle(slots, max)
		}
	}
}

// takeIdle takes the tokens free now, up to max in slots.
func (f *reliableFetch) takeIdle(slots []int, max int) []int {
	for len(slots) < max {
		select {
		case i := <-f.idle:
			slots = append(slots, i)
		default:
			return slots
		}
	}
	return slots
}

// freed returns a worker's slot token and wakes a gathering taker once the
// tokens it waits for are there.
func (f *reliableFetch) freed(i int) {
	f.idle <- i
	for k := range f.gatherers {
		g := &f.gatherers[k]
		if w := g.want.Load(); w > 0 && len(f.idle) >= int(w) {
			select {
			case g.enough <- struct{}{}:
			default:
			}
		}
	}
}

// worker is one concurrency slot: it runs the jobs it fetched ahead, else
// the jobs a taker moved for it, until the takers are done.
func (f *reliableFetch) worker(st *slotState) {
	defer f.wg.Done()
	cfg := f.cfg
	tid := tidFor(st.i)
	ah := newAhead(f, st, NewRand(uint64(cfg.Concurrency+st.i)))
	defer ah.close()
	for {
		u, ok := ah.next() // fetched while an earlier job waited (FetchAhead)
		if !ok {
			f.freed(st.i)
			if u, ok = <-st.jobs; !ok {
				return
			}
		}
		if cfg.quiet() {
			// Taken before the server went quiet, not started: back to
			// the pop end of its queue.
			f.Requeue([]Unit{u})
			continue
		}
		ah.process(st.i, tid, u)
	}
}

// Finish queues a success's acknowledgement, or writes a failure's outcome
// and takes the job out of its list in one script.
func (f *reliableFetch) Finish(u Unit, o *Outcome) error {
	oldest := u.slot != nil && u.slot.release(u.held)
	if o == nil {
		return f.acker.add(f.ackOf(u, oldest))
	}
	return f.finish(u, o)
}

// ackOf is the acknowledgement of u: by position when it was the oldest
// job of its list, its identity is of the current epoch and the
// heartbeats are fresh; by value otherwise.
func (f *reliableFetch) ackOf(u Unit, oldest bool) ack {
	if oldest && u.held != nil && f.ids.current(u.held.sl.ident) && f.ids.fresh() {
		return ack{list: u.list, raw: u.Raw, byPos: true, trim: u.held.sl.trim}
	}
	return ack{list: u.list, raw: u.Raw}
}

// FinishSuccesses queues the acknowledgements of successes together (see
// acker.addMany).
func (f *reliableFetch) FinishSuccesses(units []Unit) {
	acks := make([]ack, len(units))
	for i, u := range units {
		oldest := u.slot != nil && u.slot.release(u.held)
		acks[i] = f.ackOf(u, oldest)
	}
	f.acker.addMany(acks)
}

// finish runs the finish script for a failed (or unparsable) job.
func (f *reliableFetch) finish(u Unit, o *Outcome) error {
	cfg := f.cfg
	set, score, cutoff, maxJobs := u.list, "", "", ""
	if o.Set != "" {
		set, score = o.Set, wire.Score(o.At)
	}
	if o.Set == wire.KeyDead {
		lim := wire.MorgueLimits{}.OrDefault()
		cutoff = wire.FormatScore(wire.EpochSeconds(o.At) - lim.Timeout.Seconds())
		maxJobs = strconv.Itoa(lim.MaxJobs)
	}
	var n int
	err := cfg.Writes.Do(func(conn redis.Conn) error {
		var err error
		n, err = redis.Int(finishScript.DoContext(cfg.Writes.Ctx, conn, u.list, set, u.Raw, score, o.Payload, cutoff, maxJobs))
		return err
	})
	if err != nil {
		cfg.Logger.Error().Err(err).Str("component", "processor").Str("set", o.Set).Bytes("payload", o.Payload).
			Msg("could not write the job's outcome; it stays in the in-progress list and runs again if this process dies")
		return fmt.Errorf("sidekiq: write to %s: %w", o.Set, err)
	}
	if n == 0 {
		f.life.notOwned(u.list, u.Raw)
	}
	return nil
}

// Requeue moves unfinished jobs from their lists back to the pop end of
// their queues, one script per list: a job already acknowledged or
// recovered by another process is not pushed again.
func (f *reliableFetch) Requeue(units []Unit) error {
	for _, u := range units {
		if u.slot != nil {
			u.slot.release(u.held)
		}
	}
	return requeue(f.cfg, units)
}

func requeue(cfg *Config, units []Unit) error {
	if len(units) == 0 {
		return nil
	}
	moved, err := requeueUnits(cfg, units)
	if err != nil {
		return err
	}
	cfg.Logger.Info().Int("jobs", moved).Msg("requeued unfinished jobs")
	return nil
}

// requeueUnits moves units from their lists back to the pop end of their
// queues, one script per list, and returns how many it moved (those still
// in their lists). A failure logs the jobs of the list it could not
// requeue: they stay there and are recovered when this process is gone.
func requeueUnits(cfg *Config, units []Unit) (int, error) {
	type group struct {
		list, queue string
		raws        []any
	}
	var order []*group
	byList := map[string]*group{}
	for _, u := range units {
		g := byList[u.list]
		if g == nil {
			g = &group{list: u.list, queue: wire.QueueKey(u.Queue)}
			byList[u.list] = g
			order = append(order, g)
		}
		g.raws = append(g.raws, u.Raw)
	}
	moved := 0
	for _, g := range order {
		err := cfg.Writes.Do(func(conn redis.Conn) error {
			n, err := redis.Int(requeueScript.DoContext(cfg.Writes.Ctx, conn, append([]any{g.list, g.queue}, g.raws...)...))
			moved += n
			return err
		})
		if err != nil {
			for _, raw := range g.raws {
				cfg.Logger.Error().Err(err).Str("queue", wire.QueueName(g.queue)).Bytes("payload", raw.([]byte)).
					Msg("could not requeue job; it stays in the in-progress list and is recovered when this process is gone")
			}
			return moved, fmt.Errorf("sidekiq: requeue %d jobs: %w", len(g.raws), err)
		}
	}
	return moved, nil
}

// Close sweeps the in-progress lists one last time (anything still there
// is held by no slot: the server has requeued what it ran), then stops the
// heartbeats and the recovery.
func (f *reliableFetch) Close() {
	f.life.close()
}

// Defer marks u a success whose acknowledgement the server holds back,
// and returns it so marked for the Finish that ends it: its slot keeps it
// in its mirror (not an orphan for the own-list sweep) until then.
func (f *reliableFetch) Defer(u Unit) Unit {
	u.deferred = true
	return u
}

// heartbeatValue is the value of the reliable-fetch heartbeat keys. Ruby's
// gem only checks that a key exists; gojob reads the boot id and the
// process's start time to tell, on the same host, that a predecessor whose
// key has not expired yet is gone.
func heartbeatValue() string {
	return "gojob " + procstat.BootID() + " " + procstat.StartTime(os.Getpid())
}

// ctxTimeout is a context for one short Redis call of the background
// goroutines.
func ctxTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
