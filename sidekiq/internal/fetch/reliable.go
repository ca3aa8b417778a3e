package fetch

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/procstat"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
)

// The reliable fetch keeps every job it takes in Redis until the job's
// outcome is written. A job moves atomically from queue:<q> into one of
// its slot's in-progress lists (LMOVE; RPOPLPUSH before Redis 6.2), with
// its bytes unchanged, and leaves it with its acknowledgement (LTRIM by
// position, or LREM by value: lists.go) or, in one script, with its retry
// or dead entry. When the process dies, the lists outlive it, and a live
// process pushes their jobs back (recovery.go); the takers that move
// them are in reliable_take.go.

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
// renewed; they expire after contract.HeartbeatTTL (60 s), so a live process
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
	// batcher makes the fetches ahead of every slot (ahead.go).
	batcher aheadBatcher
	// dry: the last round's moves found a queue empty (see idleSlots).
	dry atomic.Bool
	// blockers wait in Redis for a job for the idle slots (idle.go).
	blockers *blockers
}

// NewReliable returns the reliable fetch. It writes the process's
// reliable-fetch heartbeat before it returns; through a Redis outage it
// retries until ctx ends.
func NewReliable(ctx context.Context, cfg *Config) (Fetcher, error) {
	if cfg.Identity == "" {
		return nil, errors.New("sidekiq: reliable fetch needs the process identity")
	}
	if _, _, ok := contract.ParseWorkingListKey(contract.WorkingListKey("q", cfg.Identity)); !ok {
		return nil, fmt.Errorf("sidekiq: reliable fetch: identity %q is not host:pid:hex", cfg.Identity)
	}
	n := cfg.Concurrency
	f := &reliableFetch{
		cfg: cfg, ids: newIdents(cfg.Identity), idle: make(chan int, n),
		aheadMaxRun: aheadMaxRun, aheadHold: aheadHold, aheadDepth: aheadDepth,
	}
	if cfg.AheadDepth != 0 {
		f.aheadDepth = max(cfg.AheadDepth, 0)
	}
	if cfg.AheadHold > 0 {
		f.aheadHold, f.aheadMaxRun = cfg.AheadHold, cfg.AheadHold/5
	}
	writes := &redisx.Retrier{Pool: cfg.Pool, Ctx: ctx, Outage: cfg.Outage}
	var err error
	if f.moveOK, err = probeLMOVE(writes); err != nil {
		return nil, err
	}
	f.queues = newQueues(cfg, f.moveOK)
	for _, q := range f.queues.list {
		f.ids.queues = append(f.ids.queues, q.key)
	}
	f.blockers = newBlockers(f)
	f.queues.onWake = f.blockers.cutOthers
	for i := range f.gatherers {
		f.gatherers[i].init(gatherFor)
	}
	f.slots = make([]*slotState, n)
	for i := range f.slots {
		f.slots[i] = newSlotState(i)
	}
	f.life = newReliableLife(cfg, f.ids)
	f.batcher = aheadBatcher{f: f, wake: make(chan struct{}, 1)}
	f.acker = newAcker(cfg, f)
	f.acker.hold = rideHold
	f.life.holders = f.held
	f.life.inUse = f.inUse
	f.life.dropped = f.drops.Load
	f.life.waitingSince = f.oldestWait
	f.life.blocking = f.blockers.blockingLists
	f.life.moved = f.masterMoved
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
	f.blockers.start(&running)
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

// idleSlots reports whether a slot may be idle for want of a job: an idle
// slot's token waits for a taker or a blocker holds it, or the last
// round's moves found a queue empty (so the slots of that round whose moves found nothing are idle
// again). A taker holds the tokens of the slots it gathers and moves for,
// which are about to run jobs while the queues have them.
func (f *reliableFetch) idleSlots() bool {
	return len(f.idle) > 0 || f.blockers.held.Load() > 0 || f.dry.Load()
}

// oldestWait returns since when the round or acknowledgement that has
// waited longest has been on its way (0 when none is).
func (f *reliableFetch) oldestWait() int64 {
	oldest := earliest(f.acker.waitingSince(), f.batcher.taking.Load())
	for i := range f.taking {
		oldest = earliest(oldest, f.taking[i].Load())
	}
	return oldest
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
		return ack{list: u.list, raw: u.Raw, byPos: true, trimCmd: u.held.sl.trimCmd}
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
		set, score = o.Set, contract.Score(o.At)
	}
	if o.Set == contract.KeyDead {
		lim := contract.MorgueLimits{}.OrDefault()
		cutoff = contract.FormatScore(contract.EpochSeconds(o.At) - lim.Timeout.Seconds())
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

func requeue(cfg *Config, units []Unit) error {
	if len(units) == 0 {
		return nil
	}
	moved, err := requeueUnits(cfg, units)
	if err != nil {
		return err
	}
	// At shutdown an operator wants to know; a job given back because its
	// queue was paused or at its cap while it was on its way is routine.
	lvl := zerolog.DebugLevel
	if cfg.quiet() {
		lvl = zerolog.InfoLevel
	}
	cfg.Logger.WithLevel(lvl).Int("jobs", moved).Msg("requeued unfinished jobs")
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
			g = &group{list: u.list, queue: contract.QueueKey(u.Queue)}
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
				cfg.Logger.Error().Err(err).Str("queue", contract.QueueName(g.queue)).Bytes("payload", raw.([]byte)).
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
