package fetch

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/internal/resp"
)

// Idle slots: blockers. While every queue is believed empty, the takers
// park (wake.go) and the idle slots wait for a job to be pushed. Ruby
// processes on the same queues wait in BRPOP, one client per idle thread
// (Sidekiq 6.4-8.x, lib/sidekiq/fetch.rb#retrieve_work), and Redis serves
// the clients blocked on a list in the order they blocked. A waker's
// `BLMOVE queue:q queue:q RIGHT RIGHT` takes its turn and puts the job back
// where the next blocked client, a Ruby thread, takes it: an idle gojob
// beside idle Ruby processes got nothing of a trickle. So each idle slot
// (up to maxBlockers) also waits in Redis's queue of clients, on its own
// connection, with a blocking move into its own in-progress list:
//
//	BLMOVE queue:q working:queue:q:<identity> RIGHT LEFT 2
//
// (BRPOPLPUSH before Redis 6.2). The job is in Redis throughout: in its
// queue, then in the slot's list, exactly as after a taker's LMOVE, and it
// is recorded in the slot's mirror and handed to the slot as soon as the
// reply is read. An idle process thus gets the share of a trickle that its
// idle slots are of the clients waiting, as a Ruby process does.
//
// Several queues. A blocking move names one queue, and blocking a slot on
// every queue at once would move a job per queue into one slot. So each
// blocker blocks on one queue per wait, drawn by weight among the queues
// not paused (every queue alike in strict order: while all are empty the
// first job to come is the only one, whichever its queue), and draws
// again after each timeout: the idle slots spread over the queues as the
// weights say. A job pushed to a queue that no blocker waits on is seen by
// its waker, which wakes the takers; when no idle token waits for them, a
// blocker waiting on another queue is cut off with `CLIENT UNBLOCK <id>`
// (its move returns nil as on a timeout, and moved nothing), so that its
// slot's token goes to the takers at once rather than after up to two
// seconds. The same cuts every blocker off at quiet. Where CLIENT UNBLOCK is refused (an ACL), a blocker comes
// back within its timeout.
//
// A blocker holds an idle slot's token only while every queue is believed
// empty: when a queue has jobs (its waker saw one), the takers move them in
// rounds, one round trip for many slots. A job a blocker gets does not
// mark its queue: in a trickle that would send the slot's next token to a
// taker's move that finds nothing, and the blocker would wait for it
// before it blocks again, losing its place to the other processes' clients.
//
// The sweep of the own lists does not look at a list a blocker is blocked
// on: a job may arrive in it at any moment before its reply is read
// (blockingLists). A blocker's connection that fails mid-wait may have
// moved a job it never saw: the epoch ends, as for a failed round, and
// the sweep gives the job back.

// maxBlockers caps the blocked connections of an idle process.
const maxBlockers = 32

// blockers are the fetch's blockers.
type blockers struct {
	f    *reliableFetch
	list []*blocker
	// held counts the slot tokens the blockers hold (idle slots).
	held atomic.Int32
	// cut is signalled when blockers marked cut should be unblocked.
	cut  chan struct{}
	live sync.WaitGroup // the blockers, for the unblocker at quiet

	mu sync.Mutex // the blockers' state below
}

// blocker is one blocker's state, under blockers.mu.
type blocker struct {
	id   int64       // CLIENT ID of its connection (0: unknown)
	q    *queueState // the queue it is blocked on (nil: not blocked)
	list string      // the list it moves into while blocked
	cut  bool        // to be unblocked
	// waits counts its blocking moves: a cut is meant for one of them.
	waits uint64
}

func newBlockers(f *reliableFetch) *blockers {
	bs := &blockers{f: f, cut: make(chan struct{}, 1)}
	for range min(f.cfg.Concurrency, maxBlockers) {
		bs.list = append(bs.list, &blocker{})
	}
	return bs
}

// start starts the blockers and their unblocker; running counts them.
func (bs *blockers) start(running *sync.WaitGroup) {
	for i, b := range bs.list {
		running.Add(1)
		bs.live.Add(1)
		go func() {
			defer running.Done()
			defer bs.live.Done()
			bs.run(b, uint64(1000+i))
		}()
	}
	running.Add(1)
	go func() {
		defer running.Done()
		bs.unblocker()
	}()
}

// dry reports whether every queue not paused is believed empty (the
// takers have nothing to move).
func (bs *blockers) dry() bool {
	for _, q := range bs.f.queues.list {
		if !q.empty.Load() && !bs.f.cfg.Order.Paused(q.name) {
			return false
		}
	}
	return true
}

// waitDry waits until every queue is believed empty; false at quiet.
func (bs *blockers) waitDry() bool {
	for {
		ch := bs.f.queues.driedChan()
		if bs.dry() {
			return true
		}
		select {
		case <-ch:
		case <-time.After(time.Second): // a queue paused meanwhile is dry too
		case <-bs.f.cfg.Quiet:
			return false
		}
	}
}

// pick draws the queue to block on: by weight among those not paused
// (strict order: alike); nil when all are paused.
func (bs *blockers) pick(r *rand.Rand) *queueState {
	qs := bs.f.queues
	total := 0
	for _, q := range qs.list {
		if !bs.f.cfg.Order.Paused(q.name) {
			total += bs.weight(q)
		}
	}
	if total == 0 {
		return nil
	}
	n := r.IntN(total)
	for _, q := range qs.list {
		if bs.f.cfg.Order.Paused(q.name) {
			continue
		}
		if n < bs.weight(q) {
			return q
		}
		n -= bs.weight(q)
	}
	return nil
}

func (bs *blockers) weight(q *queueState) int {
	if bs.f.queues.strict {
		return 1
	}
	return q.weight
}

// run is one blocker: while every queue is believed empty, it holds an
// idle slot's token and blocks on a queue with a move into the slot's
// list, and hands a job it gets to the slot.
func (bs *blockers) run(b *blocker, seed uint64) {
	f := bs.f
	cfg := f.cfg
	r := NewRand(seed)
	fc := &conn{cfg: cfg, dialed: f.dialed}
	defer fc.close()
	tok := -1
	giveBack := func() {
		if tok >= 0 {
			f.freed(tok)
			bs.held.Add(-1) // after: the slot is never counted busy meanwhile
			tok = -1
		}
	}
	defer giveBack()
	var idOf redis.Conn // the connection b.id is of
	for {
		if tok >= 0 && (!bs.dry() || !f.ids.fresh() || cfg.quiet()) {
			giveBack()
		}
		if !f.waitTakeable() || !bs.waitDry() {
			return
		}
		if tok < 0 {
			// Counted before the token is taken, so that no moment finds
			// an idle slot's token neither in f.idle nor held (idleSlots).
			// While it waits, every queue is believed empty: a busy slot
			// would fetch nothing ahead anyway.
			bs.held.Add(1)
			select {
			case tok = <-f.idle:
			case <-f.queues.wokeChan():
				bs.held.Add(-1)
				continue
			case <-cfg.Quiet:
				bs.held.Add(-1)
				return
			}
			if !bs.dry() {
				continue // given back at the top
			}
		}
		q := bs.pick(r)
		if q == nil {
			giveBack()
			if !cfg.sleepOrQuiet(pausePoll) {
				return
			}
			continue
		}
		var m move
		f.planMoveFrom(&m, f.slots[tok], q, q.seen.Load())
		if !fc.ready() {
			return
		}
		if fc.c != idOf {
			idOf = fc.c
			id, err := redis.Int64(fc.c.Do("CLIENT", "ID"))
			if err != nil && !isReply(err) {
				if !fc.failed(err) {
					return
				}
				continue
			}
			bs.mu.Lock()
			b.id = id // 0 when refused: never cut off, back within the timeout
			bs.mu.Unlock()
		}
		if !bs.blocking(b, q, m.sl.key) {
			return
		}
		sent := time.Now()
		raw, err := bs.block(fc.c, &m)
		if raw != nil {
			// The job is in the slot's list: its mirror gets it before the
			// list is swept again. The queue stays believed empty: more
			// jobs there are the waker's to see (its move returns at once
			// on a list that has some), and meanwhile the other blockers
			// keep their places in Redis's queue of clients.
			m.raw = raw
			bs.held.Add(-1)
			f.deliver(&m)
			tok = -1
		}
		bs.unblocked(b)
		if err != nil && !isReply(err) {
			// The move may have run unseen: a job no mirror knows.
			f.drops.Add(1)
			f.ids.bump()
			giveBack()
			if !fc.failed(err) {
				return
			}
			continue
		}
		if err != nil {
			giveBack()
			if !fc.errorReply(err) {
				return
			}
			continue
		}
		fc.ok(sent)
	}
}

// block sends the setup of a new list (as a round does) and the blocking
// move of m on c, and returns the job moved (nil: none came, or the wait
// was cut off). An error reply of the setup is returned with the move's
// outcome.
func (bs *blockers) block(c redis.Conn, m *move) ([]byte, error) {
	f := bs.f
	if m.hb {
		c.Send("SET", m.sl.ident.hbKey, f.life.hbValue, "EX", contract.HeartbeatTTL)
	}
	if m.reg {
		c.Send("SADD", contract.KeyWorkingLists, m.sl.key)
	}
	if f.moveOK {
		c.Send("BLMOVE", m.q.key, m.sl.key, "RIGHT", "LEFT", f.cfg.blockSeconds())
	} else {
		c.Send("BRPOPLPUSH", m.q.key, m.sl.key, f.cfg.blockSeconds())
	}
	if err := c.Flush(); err != nil {
		return nil, err
	}
	var replyErr error
	for range btoi(m.hb) + btoi(m.reg) {
		v, err := resp.Receive(c)
		if err != nil {
			return nil, err
		}
		if e, ok := v.(redis.Error); ok && replyErr == nil {
			replyErr = e
		}
	}
	if (m.hb || m.reg) && replyErr == nil {
		f.ids.mu.Lock()
		m.sl.ident.created = true
		m.sl.ident.lists[m.q.key] = m.sl.key
		m.sl.registered = true
		f.ids.mu.Unlock()
	}
	v, err := resp.Receive(c)
	if err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case []byte:
		return v, replyErr
	case redis.Error:
		return nil, v
	}
	return nil, replyErr
}

// blocking records that b is about to block on q, moving into list; false
// at quiet.
func (bs *blockers) blocking(b *blocker, q *queueState, list string) bool {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if bs.f.cfg.quiet() {
		return false
	}
	b.q, b.list, b.cut = q, list, false
	b.waits++
	return true
}

// unblocked records that b's blocking move returned.
func (bs *blockers) unblocked(b *blocker) {
	bs.mu.Lock()
	b.q, b.list, b.cut = nil, "", false
	bs.mu.Unlock()
}

// cutOthers cuts off one blocker waiting on a queue other than q, whose
// waker saw a job that none of the blockers got: its slot's token goes to
// the takers, which move the job if it is still there. One, not all: the
// others keep their places among the clients blocked on their queues, and
// come back within their timeout anyway. A burst gets more slots from the
// takers' rounds (cutFor).
func (bs *blockers) cutOthers(q *queueState) { bs.cutFor(q, 1) }

// cutFor cuts off up to n blockers waiting on a queue other than q, unless
// a token already waits for the takers. A taker whose round moved a job
// for every token it held cuts off as many as it moved: q may have more
// jobs, and its waker, which watches only a queue believed empty, sees
// none of them. Without it, a burst to a queue no blocker waits on ran on
// the one slot its waker's cut freed (and the slots freed by the jobs it
// ran) until the other blockers' moves timed out, up to two seconds; a
// trickle that one slot could not keep up with ran so for good, queueing
// behind it. The tokens double with each full round until a move finds
// the queue empty.
func (bs *blockers) cutFor(q *queueState, n int) {
	if len(bs.f.idle) > 0 || bs.held.Load() == 0 {
		return // a taker has a token already, or no blocker holds one
	}
	cut := false
	bs.mu.Lock()
	for _, b := range bs.list {
		if n == 0 {
			break
		}
		if b.q != nil && b.q != q && b.id != 0 && !b.cut {
			b.cut, cut = true, true
			n--
		}
	}
	bs.mu.Unlock()
	if cut {
		signal(bs.cut)
	}
}

// blockingLists returns the lists the blockers are blocked on: a job may
// be in one before its blocker has read it.
func (bs *blockers) blockingLists() map[string]bool {
	out := map[string]bool{}
	if bs == nil {
		return out
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for _, b := range bs.list {
		if b.list != "" {
			out[b.list] = true
		}
	}
	return out
}

// unblocker sends the CLIENT UNBLOCKs: for the blockers marked cut, and
// at quiet for all of them until they have all returned (an UNBLOCK that
// reaches Redis before the move it is meant for cuts nothing).
func (bs *blockers) unblocker() {
	cfg := bs.f.cfg
	done := make(chan struct{})
	go func() {
		<-cfg.Quiet
		bs.live.Wait()
		close(done)
	}()
	var again <-chan time.Time
	for {
		select {
		case <-bs.cut:
		case <-again:
		case <-cfg.Quiet:
			for {
				bs.unblock(true)
				select {
				case <-done:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
		again = nil
		if bs.unblock(false) {
			// A cut reached Redis before the move it was meant for: that
			// blocker would hold its slot's token until its timeout, and
			// the job its waker saw would wait as long. Again shortly.
			again = time.After(cutRetry)
		}
	}
}

// cutRetry is how soon a cut that found its blocker not yet blocked in
// Redis is sent again.
const cutRetry = time.Millisecond

// unblock sends CLIENT UNBLOCK for the blockers marked cut (all: every
// blocked one). It reports whether a cut found its blocker not blocked in
// Redis while it is still about to block (its move not yet there): the
// blocker is marked cut again.
func (bs *blockers) unblock(all bool) (missed bool) {
	type target struct {
		b     *blocker
		waits uint64
	}
	var ids []int64
	var targets []target
	bs.mu.Lock()
	for _, b := range bs.list {
		if b.q != nil && b.id != 0 && (all || b.cut) {
			ids = append(ids, b.id)
			targets = append(targets, target{b, b.waits})
			b.cut = false
		}
	}
	bs.mu.Unlock()
	if len(ids) == 0 {
		return false
	}
	ctx, cancel := ctxTimeout(stallAfter)
	defer cancel()
	c, err := bs.f.cfg.Pool.GetContext(ctx)
	if err != nil {
		return false // the blockers come back within their timeout
	}
	defer c.Close()
	for _, id := range ids {
		c.Send("CLIENT", "UNBLOCK", id)
	}
	if err := c.Flush(); err != nil {
		return false
	}
	for _, t := range targets {
		v, err := resp.Receive(c)
		if err != nil {
			return missed
		}
		if n, ok := v.(int64); ok && n == 0 && !all {
			// Not blocked: its move returned (it is unblocked, or blocking
			// again: a new wait) or has not reached Redis yet (the same
			// wait, still marked blocking).
			bs.mu.Lock()
			if t.b.q != nil && t.b.waits == t.waits {
				t.b.cut, missed = true, true
			}
			bs.mu.Unlock()
		}
	}
	return missed
}
