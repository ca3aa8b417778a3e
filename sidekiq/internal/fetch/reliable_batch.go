package fetch

import (
	"context"
	_ "embed"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/sidekiq/internal/redisx"
	"github.com/gojob/gojob/sidekiq/wire"
)

// reliableBatch is the batched reliable fetch: a fetcher moves, in one
// round trip, a job for every idle slot it holds (never more: a crash
// exposes nothing that is not running), and an acknowledger takes the
// finished jobs out of the in-progress list in batches. A job still costs
// two commands (its move and its acknowledgement), but a round trip carries
// a batch of them each way.
type reliableBatch struct {
	cfg  *Config
	base *reliableFetch // lists, Redis probe, life
	jobs chan Unit
	idle chan struct{} // one token per idle slot
	// gatherers are the fetchers' gathering states, which the workers
	// look at when they free a slot.
	gatherers [batchTakers]gathering
	workers   []*slotState
	acker     *acker
	wg        sync.WaitGroup // fetcher and workers
	// drops counts fetch commands whose connection failed before their
	// reply: they may have moved jobs nobody holds.
	drops atomic.Int64
	// taking is, per fetcher, since when its take has been on its way
	// (unix nanoseconds; 0 when none): the jobs it moves are nobody's
	// orphans until they are handed to the workers.
	taking [batchTakers]atomic.Int64
}

// NewReliableBatch returns the batched reliable fetch.
func NewReliableBatch(ctx context.Context, cfg *Config) (Fetcher, error) {
	base := &reliableFetch{cfg: cfg, lists: map[string]string{}}
	writes, err := base.setup(ctx)
	if err != nil {
		return nil, err
	}
	n := cfg.Concurrency
	f := &reliableBatch{cfg: cfg, base: base, jobs: make(chan Unit, n), idle: make(chan struct{}, n)}
	for i := range f.gatherers {
		f.gatherers[i].init(gatherFor)
	}
	f.acker = newAcker(cfg, base.life)
	f.acker.hold = rideHold
	f.workers = make([]*slotState, n)
	for i := range f.workers {
		f.workers[i] = &slotState{}
	}
	base.life.holders = f.held
	base.life.dropped = f.drops.Load
	base.life.waitingSince = f.oldestWait
	if err := base.life.start(writes); err != nil {
		return nil, err
	}
	return f, nil
}

// Start starts the workers, the fetcher and the acknowledger.
func (f *reliableBatch) Start() {
	for i := 0; i < f.cfg.Concurrency; i++ {
		f.idle <- struct{}{}
		f.wg.Add(1)
		go f.worker(i)
	}
	var takers sync.WaitGroup
	takers.Add(batchTakers)
	for i := range batchTakers {
		go func() {
			defer takers.Done()
			f.fetch(&f.taking[i], &f.gatherers[i])
		}()
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		takers.Wait()
		close(f.jobs)
	}()
	f.acker.start()
}

// Wait blocks until the workers are done and their acknowledgements sent.
func (f *reliableBatch) Wait() {
	f.wg.Wait()
	f.acker.close()
}

// Depth is 0: the batched fetch pipelines no blocking commands.
func (f *reliableBatch) Depth() int { return 0 }

// Requeue moves unfinished jobs back, as the pipelined reliable fetch does.
func (f *reliableBatch) Requeue(units []Unit) error {
	for _, u := range units {
		f.base.deferred.remove(u)
	}
	return requeue(f.cfg, units)
}

// Finish queues a success's acknowledgement or writes a failure's outcome.
func (f *reliableBatch) Finish(u Unit, o *Outcome) error {
	f.base.deferred.remove(u)
	if o == nil {
		return f.acker.add(u)
	}
	return finish(f.cfg, f.base.life, u, o)
}

// FinishSuccesses queues the acknowledgements of successes together.
func (f *reliableBatch) FinishSuccesses(units []Unit) {
	for _, u := range units {
		f.base.deferred.remove(u)
	}
	f.acker.addMany(units)
}

// Defer marks u a success whose acknowledgement the server holds back: it
// stays held (not an orphan for the own-list sweep) until Finish.
func (f *reliableBatch) Defer(u Unit) Unit { return f.base.Defer(u) }

// Close ends the heartbeat and the recovery.
func (f *reliableBatch) Close() {
	f.base.deferred.close()
	f.base.life.close()
}

// oldestWait returns since when the take or acknowledgement that has waited
// longest has been on its way (0 when none is).
func (f *reliableBatch) oldestWait() int64 {
	oldest := f.acker.waitingSince()
	for i := range f.taking {
		oldest = earliest(oldest, f.taking[i].Load())
	}
	return oldest
}

func (f *reliableBatch) held() map[string]map[string]int {
	in := map[string]map[string]int{}
	for _, s := range f.workers {
		s.held(in)
	}
	f.base.deferred.held(in)
	return in
}

// batchTakers is how many fetchers take batches at once, each on its own
// connection: while the workers run one batch the next is on its way (a
// third only adds contention; measured with gojob bench on 2 cores: 1
// fetcher 147k jobs/s, 2 fetchers 157-164k, 3 fetchers 116k).
const batchTakers = 2

// fetch is one fetcher. The fetchers share the idle-slot tokens: each moves
// at most as many jobs as it holds tokens and hands each job to a worker,
// so together they never move more jobs than slots are free.
func (f *reliableBatch) fetch(taking *atomic.Int64, g *gathering) {
	cfg := f.cfg
	r := NewRand(uint64(cfg.Concurrency))
	fc := &conn{cfg: cfg}
	defer fc.close()
	giveBack := func(n int) {
		for range n {
			f.idle <- struct{}{}
		}
	}
	full := false // the last take moved as many jobs as it asked for
	scratch := &takeScratch{rides: make([]Unit, 0, rideMax)}
	defer taking.Store(0)
	for {
		taking.Store(0)
		// Wait out a pause holding no slot and no take timestamp (which
		// would hold off the own-list sweep).
		if !cfg.Order.WaitUnpaused(cfg.Quiet) {
			return
		}
		select {
		case <-f.idle:
		case <-cfg.Quiet:
			return
		}
		k := 1 + f.gather(g, full)
		taking.Store(time.Now().UnixNano())
		if cfg.quiet() || !fc.ready() {
			giveBack(k)
			return
		}
		keys := cfg.Order.Args(r)
		keys = keys[:len(keys)-1]
		args := make([]any, 0, 2*len(keys)+1)
		args = append(args, keys...)
		for _, q := range keys {
			args = append(args, f.base.lists[q.(string)])
		}
		args = append(args, k)
		var units []Unit
		var err error
		if len(keys) == 1 && f.base.moveOK {
			units, err = f.takeMoves(fc, taking, scratch, keys[0].(string), k)
		} else {
			var reply any
			reply, err = cfg.do(fc.c, "EVALSHA", append([]any{takeScript.Hash(), 2 * len(keys)}, args...)...)
			if err == nil {
				units, err = takeJobs(reply, keys)
			}
		}
		if err == nil && len(units) == 0 {
			// Every queue is empty: block for one job on the first.
			giveBack(k - 1)
			k = 1
			src := keys[0].(string)
			var timeout any = Timeout
			if len(keys) > 1 {
				timeout = multiQueueIdle
			}
			var v any
			if f.base.moveOK {
				v, err = cfg.do(fc.c, "BLMOVE", src, f.base.lists[src], "RIGHT", "LEFT", timeout)
			} else {
				v, err = cfg.do(fc.c, "BRPOPLPUSH", src, f.base.lists[src], timeout)
			}
			if err == nil && v != nil {
				var raw []byte
				if raw, err = redis.Bytes(v, nil); err == nil {
					units = []Unit{{Queue: wire.QueueName(src), Raw: raw}}
				}
			}
		}
		if err != nil {
			taking.Store(0) // nothing to hand over
			giveBack(k)
			if errors.Is(err, redis.ErrNil) {
				continue
			}
			if strings.HasPrefix(err.Error(), "NOSCRIPT") {
				f.base.loadScripts()
			}
			if redisx.IsConnError(err) {
				f.drops.Add(1)
			}
			if !fc.failed(err) {
				return
			}
			continue
		}
		fc.ok()
		full = len(units) == k
		giveBack(k - len(units))
		for i := range units {
			units[i].list = f.base.lists[wire.QueueKey(units[i].Queue)]
		}
		if cfg.quiet() {
			f.Requeue(units)
			giveBack(len(units))
			return
		}
		for _, u := range units {
			f.jobs <- u
		}
	}
}

// gatherFor is how long the fetcher waits for more idle slots when the
// last batch found work waiting: a take costs the same for one job as for
// twenty, so fuller batches cost Redis far less per job.
const gatherFor = 100 * time.Microsecond

// gathering is a fetcher's state across its gathers.
type gathering struct {
	// want is how many more tokens the fetcher waits for (0: it does not
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
// queues had work at the last take (busy), those freed within gatherFor,
// up to half the slots. It returns how many it took.
//
// It does not wake for each token: it tells the workers how many it
// waits for (want), and the worker whose token makes that many wakes it
// (enough). Woken per token, the fetcher was parked and readied about
// once per job (a 200,000-job drain: 178,158 waits for 16,842 takes).
func (f *reliableBatch) gather(g *gathering, busy bool) int {
	k := 0
	target := f.cfg.Concurrency/2 - 1
	max := f.cfg.Concurrency - 1
	armed := false
	defer func() {
		if armed {
			g.want.Store(0)
			g.timer.Stop()
		}
	}()
	for {
		k = f.takeIdle(k, max)
		if !busy || k >= target || k >= max {
			return k
		}
		if !armed {
			armed = true
			g.timer.Reset(g.window)
		}
		// Set want before looking again: a worker that adds a token after
		// the look sees want and signals.
		g.want.Store(int32(target - k))
		if len(f.idle) >= target-k {
			continue
		}
		select {
		case <-g.enough:
		case <-g.timer.C:
			return f.takeIdle(k, max)
		}
	}
}

// takeIdle takes the tokens free now, counting up from k to max at most.
func (f *reliableBatch) takeIdle(k, max int) int {
	for k < max {
		select {
		case <-f.idle:
			k++
		default:
			return k
		}
	}
	return k
}

// freed returns a worker's slot token and wakes a gathering fetcher once
// the tokens it waits for are there.
func (f *reliableBatch) freed() {
	f.idle <- struct{}{}
	for i := range f.gatherers {
		g := &f.gatherers[i]
		if w := g.want.Load(); w > 0 && len(f.idle) >= int(w) {
			select {
			case g.enough <- struct{}{}:
			default:
			}
		}
	}
}

// takeMoves moves up to k jobs from one queue to its in-progress list with
// k LMOVEs in one write. Each move is atomic; a job moved before a crash is
// in the in-progress list, where recovery finds it. Cheaper than the take
// script, whose cost per call is mostly Lua's. The acknowledgements queued
// meanwhile ride in the same write, ahead of the moves: the slots those
// jobs freed are the ones the moves fill, so one round trip does what two
// would (the acknowledger sends the rest, and all of them while the
// fetcher blocks on an empty queue).
//
// The units it returns live in the fetcher's scratch until its next take.
func (f *reliableBatch) takeMoves(fc *conn, taking *atomic.Int64, sc *takeScratch, src string, k int) ([]Unit, error) {
	list := f.base.lists[src]
	c := fc.c
	corked := redisx.Cork(c)
	acks := f.acker.steal(sc.rides[:0], rideMax, taking)
	sc.rides = acks[:0]
	// One argument slice per command name, reused: Send writes the
	// command into the connection's buffer before it returns.
	lrem := sc.lrem[:]
	lrem[1] = -1
	for _, u := range acks {
		lrem[0], lrem[2] = u.list, u.Raw
		c.Send("LREM", lrem...)
	}
	clear(lrem)
	move := append(sc.move[:0], src, list, "RIGHT", "LEFT")
	for range k {
		c.Send("LMOVE", move...)
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
		f.acker.resend(acks)
		return nil, err
	}
	for i, u := range acks {
		v, err := c.Receive()
		if err != nil {
			f.drops.Add(1)
			f.acker.resend(acks[i:])
			return nil, err
		}
		f.acker.checked(u, v)
	}
	clear(acks)
	queue := wire.QueueName(src)
	clear(sc.units)
	units := sc.units[:0]
	var firstErr error
	for range k {
		v, err := c.Receive()
		if err != nil {
			// The connection broke: what was moved and not read is in the
			// in-progress list (the own-list sweep puts it back).
			f.drops.Add(1)
			return units, err
		}
		switch v := v.(type) {
		case []byte:
			units = append(units, Unit{Queue: queue, Raw: v})
		case redis.Error:
			if firstErr == nil {
				firstErr = v
			}
		}
	}
	sc.units = units
	if firstErr != nil && len(units) == 0 {
		return nil, firstErr
	}
	return units, nil
}

// takeScratch is a fetcher's memory reused from take to take: the
// acknowledgements riding in a take, the units it moved (handed to the
// workers by value before the next take) and the commands' arguments.
type takeScratch struct {
	rides []Unit
	units []Unit
	lrem  [3]any
	move  [4]any
}

// rideMax is the most acknowledgements a take carries.
const rideMax = 64

// rideHold is how long the acknowledger leaves finished jobs to the
// fetchers' takes before it sends them itself. A busy fetcher takes every
// few hundred microseconds at most; an idle one blocks, and then the
// acknowledger sends after rideHold.
const rideHold = 500 * time.Microsecond

// worker runs jobs handed over by the fetcher.
func (f *reliableBatch) worker(i int) {
	defer f.wg.Done()
	tid := tidFor(i)
	st := f.workers[i]
	for u := range f.jobs {
		st.hold(u.list, u.Raw)
		f.cfg.Process(i, tid, u)
		st.drop()
		f.freed()
	}
}
