package fetch

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/procstat"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
	"github.com/gojob/gojob/sidekiq/wire"
)

// The reliable fetch keeps every job it takes in Redis until the job's
// outcome is written: a job moves atomically from queue:<q> to this
// process's in-progress list working:queue:<q>:<identity> (BLMOVE, or
// BRPOPLPUSH before Redis 6.2), and leaves it with its acknowledgement (LREM
// after a success) or, in the same script, with its retry or dead entry.
// When the process dies, the list outlives it, and a live process pushes
// its jobs back (recovery.go). The layout is the gitlab-sidekiq-fetcher
// gem's (docs/reliable-fetch.md), so that Ruby processes using it and gojob
// recover each other's orphans.
//
// One queue: each idle slot has one `BLMOVE queue:q list RIGHT LEFT 2` in
// Redis, pipelined like the BRPOP fetch. Several queues: a script moves a
// job from the first non-empty queue in fetch order (strict or weighted),
// and when all are empty the slot blocks on the first queue for
// multiQueueIdle before it tries them all again.
//
// A success's LREM is sent by the acker, pipelined with the other slots'
// (ack.go): a job costs two commands.

var (
	//go:embed lua/reliable_take.lua
	takeSrc string
	//go:embed lua/reliable_finish.lua
	finishSrc string
	//go:embed lua/reliable_requeue.lua
	requeueSrc string
	//go:embed lua/reliable_recover.lua
	recoverSrc string

	takeScript    = redis.NewScript(-1, takeSrc)
	finishScript  = redis.NewScript(2, finishSrc)
	requeueScript = redis.NewScript(2, requeueSrc)
	recoverScript = redis.NewScript(7, recoverSrc)
)

// multiQueueIdle is how long a slot of a several-queue reliable fetch
// blocks on its first queue once all of them were empty; a job pushed to
// another queue meanwhile waits at most this long per pipelined slot.
const multiQueueIdle = 0.25

// heartbeatInterval is how often the reliable-fetch heartbeat is renewed;
// it expires after wire.HeartbeatTTL (60 s), so a live process misses five
// renewals before it could be taken for dead.
const heartbeatInterval = 10 * time.Second

// slotState is the job a reliable slot runs, and the ones it fetched
// ahead (FetchAhead), for the sweep of the own lists (a job a slot holds
// is not an orphan).
type slotState struct {
	mu   sync.Mutex
	unit []byte
	list string
	// ahead are the jobs fetched ahead, oldest first, until the slot runs
	// them (promote) or gives them back.
	ahead []heldJob
}

// heldJob is a job a slot holds and the in-progress list it is in.
type heldJob struct {
	raw  []byte
	list string
}

func (s *slotState) hold(list string, raw []byte) {
	s.mu.Lock()
	s.unit, s.list = raw, list
	s.mu.Unlock()
}

// holdAhead records a job fetched ahead of the one the slot runs.
func (s *slotState) holdAhead(list string, raw []byte) {
	s.mu.Lock()
	s.ahead = append(s.ahead, heldJob{raw: raw, list: list})
	s.mu.Unlock()
}

// promote makes raw, a job fetched ahead, the one the slot runs.
func (s *slotState) promote(raw []byte) {
	s.mu.Lock()
	for i, h := range s.ahead {
		if sameBytes(h.raw, raw) {
			s.unit, s.list = h.raw, h.list
			s.ahead = slices.Delete(s.ahead, i, i+1)
			break
		}
	}
	s.mu.Unlock()
}

func (s *slotState) drop() {
	s.mu.Lock()
	s.unit = nil
	s.mu.Unlock()
}

// dropIf forgets the slot's job, or one it fetched ahead, if it is still
// raw (the same bytes, not an equal copy): an acknowledgement that a
// middleware held back lands after the slot has moved on to its next job,
// which it must keep.
func (s *slotState) dropIf(raw []byte) {
	s.mu.Lock()
	if sameBytes(s.unit, raw) {
		s.unit = nil
	}
	for i, h := range s.ahead {
		if sameBytes(h.raw, raw) {
			s.ahead = slices.Delete(s.ahead, i, i+1)
			break
		}
	}
	s.mu.Unlock()
}

// sameBytes reports whether a and b are the same slice (not equal
// copies); a nil slice is no job.
func sameBytes(a, b []byte) bool {
	return a != nil && len(a) == len(b) && unsafe.SliceData(a) == unsafe.SliceData(b)
}

// deferredSet is the successes whose acknowledgement the server holds back
// (a durable job waiting for its row delete): their slots have moved on,
// so the own-list sweep must count them as held, or it would put a
// finished job back in its queue.
type deferredSet struct {
	mu sync.Mutex
	// in holds each success by its buffer (the fetch's reply, one per
	// fetched job), so that a job costs no copy of its bytes as a key.
	in map[*byte]heldJob
	// closed: the fetch is closing and its final sweep gives every job
	// still in its lists back, held acknowledgements included.
	closed bool
}

func (d *deferredSet) add(u Unit) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.in == nil {
		d.in = map[*byte]heldJob{}
	}
	d.in[unsafe.SliceData(u.Raw)] = heldJob{raw: u.Raw, list: u.list}
}

func (d *deferredSet) remove(u Unit) {
	if !u.deferred {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.in, unsafe.SliceData(u.Raw))
}

// held adds the held-back successes to in (none once closing).
func (d *deferredSet) held(in map[string]map[string]int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	for _, h := range d.in {
		add(in, h.list, h.raw)
	}
}

func (d *deferredSet) close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
}

// held adds the job the slot holds to in, by list.
func (s *slotState) held(in map[string]map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unit != nil {
		add(in, s.list, s.unit)
	}
	for _, h := range s.ahead {
		add(in, h.list, h.raw)
	}
}

func add(in map[string]map[string]int, list string, raw []byte) {
	if in[list] == nil {
		in[list] = map[string]int{}
	}
	in[list][string(raw)]++
}

// reliableFetch is the pipelined reliable fetch.
type reliableFetch struct {
	cfg    *Config
	pipes  *pipes
	single bool              // one queue: BLMOVE straight away
	moveOK bool              // Redis has LMOVE/BLMOVE (6.2+)
	lists  map[string]string // queue key → in-progress list
	slots  []*slotState
	life   *reliableLife
	acker  *acker
	wg     sync.WaitGroup // slots, pipes and their watch
	// deferred is the successes whose acknowledgement is held back.
	deferred deferredSet
	// aheadMaxRun, aheadHold and aheadDepth are the limits of fetching
	// ahead (ahead.go), fields so that tests can change them.
	aheadMaxRun, aheadHold time.Duration
	aheadDepth             int
}

// NewReliable returns the pipelined reliable fetch. It writes the process's
// reliable-fetch heartbeat and registers its in-progress lists before it
// returns, so that no other process takes them for orphans; through a Redis
// outage it retries until ctx ends.
func NewReliable(ctx context.Context, cfg *Config) (Fetcher, error) {
	f := &reliableFetch{cfg: cfg, lists: map[string]string{}, aheadMaxRun: aheadMaxRun, aheadHold: aheadHold, aheadDepth: aheadDepth}
	writes, err := f.setup(ctx)
	if err != nil {
		return nil, err
	}
	f.pipes = newPipes(cfg, cfg.Concurrency)
	f.slots = make([]*slotState, cfg.Concurrency)
	for i := range f.slots {
		f.slots[i] = &slotState{}
	}
	f.acker = newAcker(cfg, f.life)
	// Acknowledgements ride in the pipes' next round (a slot that finished
	// a job asks for the next one at once), or the acker sends them after
	// rideHold when no round comes (an empty queue).
	f.acker.hold = rideHold
	f.pipes.acker = f.acker
	f.life.holders = f.held
	f.life.dropped = f.pipes.dropped.Load
	f.life.waitingSince = f.oldestWait
	if err := f.life.start(writes); err != nil {
		return nil, err
	}
	return f, nil
}

// setup checks the configuration and the Redis commands, loads the
// scripts and prepares the heartbeat and the recovery, which the caller
// starts with the returned retrier once it has wired their hooks.
func (f *reliableFetch) setup(ctx context.Context) (*redisx.Retrier, error) {
	cfg := f.cfg
	if cfg.Identity == "" {
		return nil, errors.New("sidekiq: reliable fetch needs the process identity")
	}
	if _, _, ok := wire.ParseWorkingListKey(wire.WorkingListKey("q", cfg.Identity)); !ok {
		return nil, fmt.Errorf("sidekiq: reliable fetch: identity %q is not host:pid:hex", cfg.Identity)
	}
	names := cfg.Order.Names()
	f.single = len(names) == 1
	for _, q := range names {
		f.lists[wire.QueueKey(q)] = wire.WorkingListKey(q, cfg.Identity)
	}
	writes := &redisx.Retrier{Pool: cfg.Pool, Ctx: ctx, Outage: cfg.Outage}
	var err error
	f.moveOK, err = probeLMOVE(writes)
	if err != nil {
		return nil, err
	}
	f.life = newReliableLife(cfg, f.ownLists())
	return writes, nil
}

// probeLMOVE asks Redis whether it knows LMOVE (6.2+), loads the scripts
// the slots send with EVALSHA, and reports a Redis that cannot be reached.
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
		for _, s := range []*redis.Script{takeScript, finishScript, requeueScript, recoverScript} {
			if err := s.Load(conn); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("sidekiq: reliable fetch setup: %w", err)
	}
	return ok, nil
}

func (f *reliableFetch) ownLists() []string {
	out := make([]string, 0, len(f.lists))
	for _, q := range f.cfg.Order.Names() {
		out = append(out, f.lists[wire.QueueKey(q)])
	}
	return out
}

// Start starts the slots, their pipes and the acknowledgements.
func (f *reliableFetch) Start() {
	f.acker.start()
	f.pipes.start(&f.wg)
	for i := 0; i < f.cfg.Concurrency; i++ {
		f.wg.Add(1)
		go f.slot(i, f.slots[i])
	}
}

// Wait blocks until the slots and the pipes have returned and the
// acknowledgements are sent.
func (f *reliableFetch) Wait() {
	f.wg.Wait()
	f.acker.close()
}

// Depth returns how many fetches each connection carries at most.
func (f *reliableFetch) Depth() int { return f.pipes.depth }

// held lists the jobs the slots hold, by in-progress list.
func (f *reliableFetch) held() map[string]map[string]int {
	in := map[string]map[string]int{}
	for _, s := range f.slots {
		s.held(in)
	}
	f.deferred.held(in)
	return in
}

// oldestWait returns since when the pipe or acknowledgement that has
// waited longest for a reply has been waiting (0 when none is waiting).
func (f *reliableFetch) oldestWait() int64 {
	oldest := f.acker.waitingSince()
	for _, fp := range f.pipes.list {
		oldest = earliest(earliest(oldest, fp.waitingSince.Load()), fp.acking.Load())
	}
	return oldest
}

// slot is one concurrency slot: it moves a job to the in-progress list
// through the pipes, runs it, and repeats until the server is quiet.
func (f *reliableFetch) slot(i int, st *slotState) {
	defer f.wg.Done()
	cfg := f.cfg
	r := NewRand(uint64(i))
	tid := tidFor(i)
	req := &fetchReq{cmds: make([]pipeCmd, 1), reply: make(chan fetchReply, 1)}
	block := false // every queue was empty at the last try
	// With one queue, every fetch is one of two commands: a move (LMOVE)
	// while the queue has jobs, and the blocking move (BLMOVE) once it
	// was found empty. Redis spends about half as long on the plain move
	// (INFO commandstats during gojob bench: 0.64 against 1.22 µs a call).
	var fixed, fixedNow pipeCmd
	var fixedDecode func(any) (fetchReply, error)
	if f.single {
		keys := cfg.Order.Args(r)
		fixed, fixedDecode = f.move(keys[0].(string))
		fixedNow = f.moveNow(keys[0].(string))
	}
	ah := newAhead(f, st, r, fixedNow, fixedDecode)
	defer ah.close()
	for {
		u, ok := ah.next() // fetched while an earlier job waited (FetchAhead)
		if !ok {
			if !cfg.Order.WaitUnpaused(cfg.Quiet) {
				return
			}
			var list string
			switch {
			case f.single && block:
				req.cmds[0], req.decode = fixed, fixedDecode
				list = fixed.args[1].(string)
			case f.single:
				req.cmds[0], req.decode = fixedNow, fixedDecode
				list = fixed.args[1].(string)
			case block:
				keys := cfg.Order.Args(r)
				req.cmds[0], req.decode = f.move(keys[0].(string))
				list = req.cmds[0].args[1].(string)
			default:
				f.takeNow(req, r)
			}
			rep, ok := f.pipes.do(req)
			if !ok {
				return
			}
			if !f.fetched(&rep) {
				// Found empty: block on the next try (after a blocking try
				// that timed out, try every queue again).
				block = !block && rep.done && rep.err == nil
				continue
			}
			block = false
			if list == "" {
				list = f.lists[wire.QueueKey(rep.queue)]
			}
			st.hold(list, rep.raw)
			u = Unit{Queue: rep.queue, Raw: rep.raw, list: list, slot: st}
		}
		if cfg.quiet() {
			// Fetched after we were told to stop: back to the queue.
			f.Requeue([]Unit{u})
			return
		}
		ah.process(i, tid, u)
	}
}

// takeNow makes req the take script's fetch of one job from the first
// non-empty queue in fetch order, without blocking.
func (f *reliableFetch) takeNow(req *fetchReq, r *rand.Rand) {
	keys := f.cfg.Order.Args(r)
	keys = keys[:len(keys)-1] // the BRPOP timeout
	args := make([]any, 0, 3+2*len(keys))
	args = append(args, takeScript.Hash(), 2*len(keys))
	args = append(args, keys...)
	for _, k := range keys {
		args = append(args, f.lists[k.(string)])
	}
	args = append(args, 1)
	req.cmds[0] = pipeCmd{"EVALSHA", args}
	req.decode = f.takeReply(keys)
}

// fetched reports whether rep brought a job, reloading the scripts when
// Redis lost them.
func (f *reliableFetch) fetched(rep *fetchReply) bool {
	if rep.err != nil && strings.HasPrefix(rep.err.Error(), "NOSCRIPT") {
		f.loadScripts()
	}
	return rep.ok
}

func (f *reliableFetch) loadScripts() {
	_ = f.cfg.Writes.Do(func(conn redis.Conn) error {
		for _, s := range []*redis.Script{takeScript, finishScript, requeueScript, recoverScript} {
			if err := s.Load(conn); err != nil {
				return err
			}
		}
		return nil
	})
}

// move returns the blocking move of one job from queue key src to its
// in-progress list, and the reader of its reply.
func (f *reliableFetch) move(src string) (pipeCmd, func(any) (fetchReply, error)) {
	list := f.lists[src]
	timeout := any(Timeout)
	if !f.single {
		timeout = multiQueueIdle
	}
	cmd := pipeCmd{"BRPOPLPUSH", []any{src, list, timeout}}
	if f.moveOK {
		cmd = pipeCmd{"BLMOVE", []any{src, list, "RIGHT", "LEFT", timeout}}
	}
	return cmd, moveReply(wire.QueueName(src), list)
}

// moveNow returns the move of one job from queue key src to its
// in-progress list that does not block (LMOVE; RPOPLPUSH on Redis < 6.2),
// whose reply moveReply reads as move's.
func (f *reliableFetch) moveNow(src string) pipeCmd {
	list := f.lists[src]
	if f.moveOK {
		return pipeCmd{"LMOVE", []any{src, list, "RIGHT", "LEFT"}}
	}
	return pipeCmd{"RPOPLPUSH", []any{src, list}}
}

// moveReply reads a BLMOVE/BRPOPLPUSH reply: the job, or nil on timeout.
func moveReply(queue, list string) func(v any) (fetchReply, error) {
	return func(v any) (fetchReply, error) {
		switch v := v.(type) {
		case nil:
			return fetchReply{}, nil
		case redis.Error:
			return fetchReply{}, v
		case []byte:
			return fetchReply{ok: true, queue: queue, raw: v}, nil
		}
		return fetchReply{}, errors.New("sidekiq: unexpected BLMOVE reply")
	}
}

// takeReply reads the take script's reply for one job.
func (f *reliableFetch) takeReply(keys []any) func(v any) (fetchReply, error) {
	return func(v any) (fetchReply, error) {
		jobs, err := takeJobs(v, keys)
		if err != nil || len(jobs) == 0 {
			return fetchReply{}, err
		}
		return fetchReply{ok: true, queue: jobs[0].Queue, raw: jobs[0].Raw}, nil
	}
}

// takeJobs reads the take script's reply {i1, job1, …} as units of the
// queues keys[i-1].
func takeJobs(v any, keys []any) ([]Unit, error) {
	if e, ok := v.(redis.Error); ok {
		return nil, e
	}
	vals, err := redis.Values(v, nil)
	if err != nil {
		return nil, err
	}
	out := make([]Unit, 0, len(vals)/2)
	for i := 0; i+1 < len(vals); i += 2 {
		idx, err := redis.Int(vals[i], nil)
		raw, err2 := redis.Bytes(vals[i+1], nil)
		if err != nil || err2 != nil || idx < 1 || idx > len(keys) {
			return nil, errors.New("sidekiq: unexpected reply of the take script")
		}
		out = append(out, Unit{Queue: wire.QueueName(keys[idx-1].(string)), Raw: raw})
	}
	return out, nil
}

// Finish queues a success's acknowledgement, or writes a failure's outcome
// and takes the job out of the in-progress list in one script.
func (f *reliableFetch) Finish(u Unit, o *Outcome) error {
	if u.slot != nil {
		defer u.slot.dropIf(u.Raw)
	}
	f.deferred.remove(u)
	if o == nil {
		return f.acker.add(u)
	}
	return finish(f.cfg, f.life, u, o)
}

// FinishSuccesses queues the acknowledgements of successes together (see
// acker.addMany).
func (f *reliableFetch) FinishSuccesses(units []Unit) {
	for _, u := range units {
		if u.slot != nil {
			u.slot.dropIf(u.Raw)
		}
		f.deferred.remove(u)
	}
	f.acker.addMany(units)
}

// finish runs the finish script for a failed (or unparsable) job.
func finish(cfg *Config, life *reliableLife, u Unit, o *Outcome) error {
	set, score, cutoff, maxJobs := u.list, "", "", ""
	if o.Set != "" {
		set, score = o.Set, wire.Score(o.At)
	}
	if o.Set == wire.KeyDead {
		lim := wire.MorgueLimits{}.OrDefault()
		cutoff = wire.FormatScore(wire.EpochSeconds(o.At) - lim.Timeout.Seconds())
		maxJobs = fmt.Sprint(lim.MaxJobs)
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
		life.notOwned(u.list, u.Raw)
	}
	return nil
}

// Requeue moves unfinished jobs from the in-progress lists back to the pop
// end of their queues, one script per list: a job already acknowledged or
// recovered by another process is not pushed again.
func (f *reliableFetch) Requeue(units []Unit) error {
	for _, u := range units {
		if u.slot != nil {
			u.slot.dropIf(u.Raw)
		}
		f.deferred.remove(u)
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

// requeueUnits moves units from their in-progress lists back to the pop
// end of their queues, one script per list, and returns how many it moved
// (those still in their lists). A failure logs the jobs of the list it
// could not requeue.
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
// heartbeat and the recovery.
func (f *reliableFetch) Close() {
	f.deferred.close()
	f.life.close()
}

// Defer marks u a success whose acknowledgement the server holds back, and
// returns it so marked for the Finish that ends it: it stays held (not an
// orphan for the own-list sweep) until then.
func (f *reliableFetch) Defer(u Unit) Unit {
	u.deferred = true
	f.deferred.add(u)
	return u
}

// heartbeatValue is the value of the reliable-fetch heartbeat key. Ruby's
// gem only checks that the key exists; gojob reads the boot id and the
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
