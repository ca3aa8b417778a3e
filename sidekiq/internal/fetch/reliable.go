package fetch

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
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
	f.acker = newAcker(cfg, &ackFetch{ids: f.ids, life: f.life, drops: &f.drops})
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
	err := writes.Do(func(conn redis.Conn) (err error) {
		if ok, err = knows(conn, "LMOVE", "gojob-probe-absent", "gojob-probe-absent", "RIGHT", "LEFT"); err != nil {
			return err
		}
		return loadScripts(conn)
	})
	if err != nil {
		return false, fmt.Errorf("sidekiq: reliable fetch setup: %w", err)
	}
	return ok, nil
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
	if o == nil {
		return f.acker.add(f.ackOf(u))
	}
	// The job leaves its slot's mirror once the script has run (see
	// ackOf): until then it is still in its list.
	err := f.finish(u, o)
	if u.slot != nil {
		u.slot.release(u.held)
	}
	return err
}

// ackOf is the acknowledgement of u: by position when every job before
// it in its list is being acknowledged by position too, its identity is
// of the current epoch and the heartbeats are fresh; by value otherwise.
// The job stays in its slot's mirror until its acknowledgement has run
// (ack.resolve): until then it is in its list, no orphan for the sweep of
// the own lists, and a job behind one acknowledged by value is not
// acknowledged by position (its LTRIM, sent on another connection, could
// run first and take out the older entry, which the LREM would then not
// find, leaving the newer job's entry in the list to be run again).
func (f *reliableFetch) ackOf(u Unit) ack {
	if u.slot == nil || u.held == nil {
		return ack{list: u.list, raw: u.Raw}
	}
	k := ack{list: u.list, raw: u.Raw, held: u.held, slot: u.slot}
	if f.ids.current(u.held.sl.ident) && f.ids.fresh() && u.slot.trimByPosition(u.held) {
		k.byPos, k.trimCmd = true, u.held.sl.trimCmd
		return k
	}
	return k
}

// FinishSuccesses queues the acknowledgements of successes together (see
// acker.addMany).
func (f *reliableFetch) FinishSuccesses(units []Unit) {
	acks := make([]ack, len(units))
	for i, u := range units {
		acks[i] = f.ackOf(u)
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
