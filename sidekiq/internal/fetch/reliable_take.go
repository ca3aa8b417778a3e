package fetch

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/internal/resp"
)

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
	// batcher makes the fetches ahead of every slot (ahead.go).
	batcher aheadBatcher
	// dry: the last round's moves found a queue empty (see idleSlots).
	dry atomic.Bool
	// blockers wait in Redis for a job for the idle slots (idle.go).
	blockers *blockers
}

// idleSlots reports whether a slot may be idle for want of a job: an idle
// slot's token waits for a taker or a blocker holds it, or the last
// round's moves found a queue empty (so the slots of that round whose moves found nothing are idle
// again). A taker holds the tokens of the slots it gathers and moves for,
// which are about to run jobs while the queues have them.
func (f *reliableFetch) idleSlots() bool {
	return len(f.idle) > 0 || f.blockers.held.Load() > 0 || f.dry.Load()
}

// Requeue moves unfinished jobs from their lists back to the pop end of
// their queues, one script per list: a job already acknowledged or
// recovered by another process is not pushed again.
//
// The units leave their slots' mirrors only once the script has run:
// until then they are still in their lists, and a slot that acknowledged
// a job by position meanwhile (LTRIM removes a list's oldest entry, which
// its mirror must know) would take one of them out instead of its own.
// When the requeue fails they stay in their lists, known to no mirror: the
// epoch ends (no position is trusted there any more) and the sweep of the
// own lists gives them back.
func (f *reliableFetch) Requeue(units []Unit) error {
	err := requeue(f.cfg, units)
	f.released(units, err)
	return err
}

// released forgets units given back (or not: err) in their slots'
// mirrors (see Requeue).
func (f *reliableFetch) released(units []Unit, err error) {
	for _, u := range units {
		if u.slot != nil {
			u.slot.release(u.held)
		}
	}
	if err != nil {
		f.drops.Add(1)
		f.ids.bump()
	}
}

// dialed checks a new fetch connection: the Redis it reached is the one
// seen before, or the change is acted on before the connection moves a
// job. An INFO that Redis refuses (an ACL) checks nothing.
func (f *reliableFetch) dialed(c redis.Conn) error {
	info, err := redis.String(c.Do("INFO", "server"))
	if err != nil {
		if isReply(err) {
			return nil
		}
		return err
	}
	if id := runIDOf(info); id != "" && f.life.master.observe(id) {
		f.life.moved()
		signal(f.life.changed)
	}
	return nil
}

// masterMoved ends the epoch after a change of master, and makes the
// sweep of the own lists look.
func (f *reliableFetch) masterMoved() {
	f.ids.bump()
	f.drops.Add(1)
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
	// out is the round's commands, encoded (send).
	out []byte
}

// planMove fills m with a move for slot s from the queue the fetch order
// gives; false when every queue is believed empty (or paused).
func (f *reliableFetch) planMove(m *move, s *slotState, r *rand.Rand) bool {
	q, seen := f.queues.pick(r)
	if q == nil {
		return false
	}
	f.planMoveFrom(m, s, q, seen)
	return true
}

// planMoveFrom fills m with a move for slot s from q, whose sighting
// count was seen.
func (f *reliableFetch) planMoveFrom(m *move, s *slotState, q *queueState, seen uint64) {
	sl := s.list(f.ids, q)
	*m = move{slot: s, q: q, seen: seen, sl: sl}
	f.ids.mu.Lock()
	m.reg = !sl.registered
	m.hb = !sl.ident.created
	f.ids.mu.Unlock()
}

// send writes a round (the acknowledgements, then each move with the
// setup of a new list before it) in one write and reads the replies,
// recording each moved job in its slot's mirror. It returns the first
// error: a connection error leaves the moves not marked done unknown (the
// round failed: failedRound); an error reply (a queue key that is not a
// list, say) is only the move's, and an acknowledgement Redis refused goes
// again by value. Every reply is read either way.
func (f *reliableFetch) send(c redis.Conn, rd *round) error {
	t := time.AfterFunc(stallAfter, func() { f.cfg.Outage.Stalled(stallAfter) })
	defer t.Stop()
	recheck(f.ids, rd.acks)
	var err error
	rw, raw := resp.Raw(c)
	if raw {
		buf := rd.out[:0]
		for i := range rd.acks {
			buf = rd.acks[i].appendTo(buf)
		}
		for _, m := range rd.moves {
			if m.hb {
				buf = resp.AppendCmd(buf, "SET", m.sl.ident.hbKey, f.life.hbValue, "EX", heartbeatTTL)
			}
			if m.reg {
				buf = resp.AppendCmd(buf, "SADD", contract.KeyWorkingLists, m.sl.key)
			}
			if f.moveOK {
				buf = append(buf, m.sl.moveCmd...)
			} else {
				buf = append(buf, m.sl.rplCmd...)
			}
		}
		err = rw.WriteRaw(buf)
		rd.out = resp.KeepBuf(buf)
	} else {
		err = f.sendRedigo(c, rd)
	}
	if err != nil {
		return err
	}
	rp, err := resp.NewRoundReader(c, raw)
	if err != nil {
		return err
	}
	var rep resp.Reply
	var replyErr error
	var refused []ack
	dry := false // a move found its queue empty
	defer func() {
		if len(rd.moves) > 0 {
			f.dry.Store(dry)
		}
	}()
	for i := range rd.acks {
		if err := rp.Next(&rep); err != nil {
			return err // failedRound resends them all: one that ran finds nothing
		}
		if rep.Kind == resp.ReplyError {
			// Not run (READONLY after a failover, LOADING): again by
			// value, through the retrier, once the round is read.
			refused = append(refused, rd.acks[i])
			if replyErr == nil {
				replyErr = rep.Err()
			}
		}
		rd.acks[i].checkedReply(f.acker.f, &rep)
	}
	rd.acks = rd.acks[:0]
	if len(refused) > 0 {
		defer f.acker.resend(refused)
	}
	for i := range rd.moves {
		m := &rd.moves[i]
		setup := true
		for range btoi(m.hb) + btoi(m.reg) {
			if err := rp.Next(&rep); err != nil {
				return err
			}
			if rep.Kind == resp.ReplyError {
				setup = false
				if replyErr == nil {
					replyErr = rep.Err()
				}
			}
		}
		if (m.hb || m.reg) && setup {
			f.ids.mu.Lock()
			m.sl.ident.created = true
			m.sl.ident.lists[m.q.key] = m.sl.key
			m.sl.registered = true
			f.ids.mu.Unlock()
		}
		if err := rp.Next(&rep); err != nil {
			return err
		}
		m.done = true
		switch rep.Kind {
		case resp.ReplyBulk:
			m.raw = rep.Bytes
		case resp.ReplyNil:
			m.q.markEmpty(m.seen)
			dry = true
		case resp.ReplyError:
			m.err = rep.Err()
			if replyErr == nil {
				replyErr = m.err
			}
		}
	}
	return replyErr
}

// heartbeatTTL is contract.HeartbeatTTL as a command argument.
var heartbeatTTL = strconv.Itoa(contract.HeartbeatTTL)

// sendRedigo writes a round as send does, through redigo, on a connection
// that takes no encoded commands.
func (f *reliableFetch) sendRedigo(c redis.Conn, rd *round) error {
	corked := resp.Cork(c)
	for i := range rd.acks {
		rd.acks[i].send(c)
	}
	for _, m := range rd.moves {
		if m.hb {
			c.Send("SET", m.sl.ident.hbKey, f.life.hbValue, "EX", contract.HeartbeatTTL)
		}
		if m.reg {
			c.Send("SADD", contract.KeyWorkingLists, m.sl.key)
		}
		if f.moveOK {
			c.Send("LMOVE", m.sl.move...)
		} else {
			c.Send("RPOPLPUSH", m.sl.rpl...)
		}
	}
	err := c.Flush()
	if corked != nil {
		if uerr := corked.Uncork(); err == nil {
			err = uerr
		}
	}
	return err
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
	return Unit{Queue: m.q.name, Raw: m.raw, reliableUnit: reliableUnit{list: m.sl.key, held: h, slot: m.slot}}
}

// taker is one taker goroutine. The takers share the idle-slot tokens:
// each moves at most one job per token it holds, into that slot's list,
// and hands the job to the slot.
func (f *reliableFetch) taker(taking *atomic.Int64, g *gathering, seed uint64) {
	cfg := f.cfg
	r := NewRand(seed)
	fc := &conn{cfg: cfg, dialed: f.dialed}
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
		sent := time.Now()
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
		if got > 0 && got == len(slots) {
			f.blockers.cutFor(rd.moves[0].q, got)
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
			if !fc.errorReply(err) {
				return
			}
			continue
		}
		fc.ok(sent)
		full = got == len(slots)
	}
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

// errUnconfirmed is the fetch's failure while it waits for its heartbeats.
var errUnconfirmed = fmt.Errorf("the reliable fetch's in-progress heartbeats could not be confirmed for %s: no job is taken until they are", positionFresh)

// waitTakeable waits out a pause of every queue, and heartbeats not
// confirmed for positionFresh (an outage, or a renewal that found them
// gone: this process may have been taken for dead). It reports false
// when the server went quiet.
func (f *reliableFetch) waitTakeable() bool {
	waited := false
	for {
		if !f.cfg.Order.WaitUnpaused(f.cfg.Quiet) {
			return false
		}
		if f.ids.fresh() {
			if waited {
				f.cfg.Health.cleared(errUnconfirmed)
			}
			return true
		}
		waited = true
		// Not ready: no job can be taken until they are (cleared above).
		f.cfg.Health.failed(errUnconfirmed)
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
		ah.process(st.i, u)
	}
}
