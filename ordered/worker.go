package ordered

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/monoclock"
	"github.com/gojob/gojob/internal/orderedstore"
	"github.com/gojob/gojob/sidekiq"
)

// Defaults of Config.
const (
	defaultConcurrency  = 10
	defaultLeaseTTL     = 10 * time.Second
	defaultPollInterval = 100 * time.Millisecond
	defaultMaxBatch     = 1000
)

// errClosed is returned by Start on a worker that was stopped.
var errClosed = errors.New("ordered: worker closed")

// Config configures the worker NewWorker returns.
type Config struct {
	Pool  *redis.Pool
	Queue string
	// Shards is the queue's shard count: 0 adopts the queue's (or 16 for
	// a new queue); another count than the queue's fails Start.
	Shards int
	// Concurrency is the number of slots (default 10); each works one shard
	// at a time.
	Concurrency int
	Handler     Handler
	// MaxRetryCount is Lowkiq's max_retry_count: a key whose batch failed
	// this many times sends its oldest payload to the morgue (default 25,
	// Lowkiq's).
	MaxRetryCount int
	// RetryIn is Lowkiq's retry_in(count): the delay before a key that
	// failed with retry_count count runs again (default Lowkiq's:
	// count⁴ + 15 + rand(30)·(count+1) seconds).
	RetryIn func(count int) time.Duration
	// BatchKeys is Lowkiq's batch_size: due keys of one shard taken in
	// one fetch (default 1). Each key is its own Perform call.
	BatchKeys int
	// MaxBatch caps the payloads of one key taken in one fetch (default
	// 1000); the rest follow in the next fetch.
	MaxBatch int
	// LeaseTTL is how long a shard lease lasts without a heartbeat: a
	// process that dies has its shards taken over after at most this long
	// (default 10 s). Heartbeats run every LeaseTTL/4.
	LeaseTTL time.Duration
	// PollInterval is the wait of a slot that found nothing due (default
	// 100 ms).
	PollInterval time.Duration
	// ShutdownTimeout bounds Stop's wait for running batches; after it,
	// their contexts are cancelled and what they did not finish goes back.
	ShutdownTimeout time.Duration
	// Identity names this process in leases (default host:pid:random).
	Identity string
	Clock    clock.Clock
	Logger   zerolog.Logger
}

func (c *Config) withDefaults() Config {
	out := *c
	out.Concurrency = cmp.Or(out.Concurrency, defaultConcurrency)
	out.MaxRetryCount = cmp.Or(out.MaxRetryCount, defaultMaxRetryCount)
	if out.RetryIn == nil {
		out.RetryIn = defaultRetryIn
	}
	out.BatchKeys = cmp.Or(out.BatchKeys, 1)
	out.MaxBatch = cmp.Or(out.MaxBatch, defaultMaxBatch)
	out.LeaseTTL = cmp.Or(out.LeaseTTL, defaultLeaseTTL)
	out.PollInterval = cmp.Or(out.PollInterval, defaultPollInterval)
	out.ShutdownTimeout = cmp.Or(out.ShutdownTimeout, 25*time.Second)
	if out.Identity == "" {
		host, _ := os.Hostname()
		out.Identity = fmt.Sprintf("%s:%d:%s", host, os.Getpid(), contract.NewJID()[:8])
	}
	out.Clock = monoclock.Or(out.Clock)
	return out
}

func (c *Config) validate() error {
	switch {
	case c.Pool == nil:
		return errors.New("ordered: Config.Pool is required")
	case c.Handler == nil:
		return errors.New("ordered: Config.Handler is required")
	case c.Shards < 0, c.Concurrency < 0, c.MaxRetryCount < 0, c.BatchKeys < 0, c.MaxBatch < 0:
		return errors.New("ordered: Shards, Concurrency, MaxRetryCount, BatchKeys and MaxBatch must not be negative")
	case c.LeaseTTL != 0 && c.LeaseTTL < 100*time.Millisecond:
		return errors.New("ordered: LeaseTTL must be at least 100ms")
	}
	return orderedstore.ValidQueue(c.Queue)
}

// worker processes one ordered queue; see NewWorker.
type worker struct {
	cfg  Config
	keys orderedstore.Keys
	log  zerolog.Logger

	shards int

	mu      sync.Mutex
	held    map[int]string    // shard → fencing token
	running map[int]*inflight // shard → batch being worked here
	valid   time.Time         // leases are surely ours until then (monotonic)
	stats   struct{ done, failed int64 }

	quit     chan struct{} // closed by Stop: no more fetches
	hardCtx  context.Context
	hardStop context.CancelFunc
	slots    sync.WaitGroup
	beatQuit chan struct{} // closed by Stop once batches ended or were given up
	beatDone chan struct{}
	state    int // 0 new, 1 started, 2 stopped
}

type inflight struct {
	token  string
	cancel context.CancelFunc
	lost   bool
}

// NewWorker checks cfg and returns the worker of one ordered queue, a
// service (srv.Serve(w), or Start and Stop of its own): it leases a fair
// share of the queue's shards (renewed by a heartbeat, taken over when it
// dies) and works each leased shard with one slot at a time.
//
// Start declares the queue, takes a first share of shards and starts the
// heartbeat and the slots; it fails when Config.Shards is not the queue's
// count. Stop stops fetching, waits up to ShutdownTimeout (or its context)
// for running batches, cancels the rest (their unfinished jobs go back to
// the queue unchanged), and gives the leases back.
func NewWorker(cfg *Config) (sidekiq.Service, error) {
	w, err := newWorker(cfg)
	if err != nil {
		return nil, err
	}
	return w, nil
}

func newWorker(cfg *Config) (*worker, error) {
	if cfg == nil {
		return nil, errors.New("ordered: nil Config")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	w := &worker{cfg: c, keys: orderedstore.KeysOf(c.Queue), held: map[int]string{}, running: map[int]*inflight{},
		quit: make(chan struct{}), beatQuit: make(chan struct{}), beatDone: make(chan struct{}),
		log: c.Logger.With().Str("component", "ordered").Str("queue", c.Queue).Logger()}
	w.hardCtx, w.hardStop = context.WithCancel(context.Background())
	return w, nil
}

// heldShards returns the shards this worker holds a lease on.
func (w *worker) heldShards() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]int, 0, len(w.held))
	for s := range w.held {
		out = append(out, s)
	}
	return out
}

// swapState moves the worker to state st and returns the one it was in.
func (w *worker) swapState(st int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.state
	w.state = st
	return old
}

// Start starts the worker (see NewWorker).
func (w *worker) Start(ctx context.Context) error {
	if w.swapState(1) != 0 {
		return errClosed
	}
	n, err := declare(ctx, w.cfg.Pool, w.cfg.Queue, w.cfg.Shards, w.cfg.Clock.Now())
	if err != nil {
		return err
	}
	w.shards = n
	if _, err := w.beat(ctx); err != nil {
		return fmt.Errorf("ordered: first heartbeat: %w", err)
	}
	w.log.Info().Str("identity", w.cfg.Identity).Int("shards", n).Int("concurrency", w.cfg.Concurrency).
		Ints("leased", w.heldShards()).Msg("ordered worker started")
	go w.beatLoop()
	for i := 0; i < w.cfg.Concurrency; i++ {
		w.slots.Add(1)
		go w.slotLoop()
	}
	return nil
}

// Stop stops the worker (see NewWorker).
func (w *worker) Stop(ctx context.Context) error {
	if w.swapState(2) != 1 {
		return nil
	}
	close(w.quit)
	done := make(chan struct{})
	go func() { w.slots.Wait(); close(done) }()
	timer := time.NewTimer(w.cfg.ShutdownTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	case <-ctx.Done():
	}
	w.hardStop()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		w.log.Warn().Msg("handlers ignore cancellation; their batches go back when their leases expire")
	}
	close(w.beatQuit)
	<-w.beatDone
	return w.release(context.Background())
}

// release gives the leases back (those with no batch in flight) and
// leaves the member set.
func (w *worker) release(ctx context.Context) error {
	w.mu.Lock()
	args := []any{w.keys.Prefix(), w.cfg.Identity}
	for s, tok := range w.held {
		args = append(args, s, tok)
	}
	w.held = map[int]string{}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := w.cfg.Pool.GetContext(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = orderedstore.ReleaseScript.DoContext(ctx, conn, args...)
	return err
}

// sleep waits d or until Stop; it reports false on Stop.
func (w *worker) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.quit:
		return false
	case <-t.C:
		return true
	}
}

func (w *worker) slotLoop() {
	defer w.slots.Done()
	for {
		select {
		case <-w.quit:
			return
		default:
		}
		b, err := w.fetch(w.hardCtx)
		if err != nil {
			w.log.Warn().Err(err).Msg("fetch failed")
		}
		if b == nil {
			if !w.sleep(w.cfg.PollInterval) {
				return
			}
			continue
		}
		w.work(b)
	}
}

// taken is one key of a fetched batch.
type taken struct {
	key       string
	rc        int
	performIn string
	payloads  [][]byte
	scores    []float64
}

// fetched is a batch: due keys of one shard, with the lease token it was
// taken under.
type fetched struct {
	shard int
	token string
	keys  []*taken
	ctx   context.Context
}

// fetch takes the next batch of the owned shard whose oldest key is the
// most overdue, or returns nil.
func (w *worker) fetch(ctx context.Context) (*fetched, error) {
	w.mu.Lock()
	if len(w.held) == 0 {
		w.mu.Unlock()
		return nil, nil
	}
	args := []any{w.keys.Prefix(), w.cfg.Identity, w.cfg.Clock.Now().UnixMilli(), w.cfg.BatchKeys, w.cfg.MaxBatch}
	for s, tok := range w.held {
		if w.running[s] == nil {
			args = append(args, s, tok)
		}
	}
	w.mu.Unlock()
	if len(args) == 5 {
		return nil, nil
	}
	conn, err := w.cfg.Pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	reply, err := redis.Values(orderedstore.FetchScript.DoContext(ctx, conn, args...))
	if err != nil {
		return nil, err
	}
	if len(reply) < 2 {
		return nil, fmt.Errorf("ordered: fetch: unexpected reply %v", reply)
	}
	if lost, _ := redis.Ints(reply[1], nil); len(lost) > 0 {
		w.dropLost(lost)
	}
	if reply[0] == nil {
		return nil, nil
	}
	shard, err := redis.Int(reply[0], nil)
	if err != nil {
		return nil, err
	}
	b := &fetched{shard: shard}
	for _, e := range reply[2:] {
		vals, err := redis.ByteSlices(e, nil)
		if err != nil || len(vals) < 3 || len(vals)%2 == 0 {
			return nil, fmt.Errorf("ordered: fetch: bad entry %v", e)
		}
		t := &taken{key: string(vals[0]), performIn: string(vals[2])}
		t.rc, _ = strconv.Atoi(string(vals[1]))
		for i := 3; i < len(vals); i += 2 {
			f, _ := strconv.ParseFloat(string(vals[i+1]), 64)
			t.payloads = append(t.payloads, vals[i])
			t.scores = append(t.scores, f)
		}
		b.keys = append(b.keys, t)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	tok, ok := w.held[shard]
	if !ok {
		// Lost between the script and here: the new owner restores it.
		return nil, nil
	}
	b.token = tok
	var cancel context.CancelFunc
	b.ctx, cancel = context.WithCancel(w.hardCtx)
	w.running[shard] = &inflight{token: tok, cancel: cancel}
	return b, nil
}

// dropLost forgets shards whose lease is no longer ours and cancels their
// running batches (whose commits the new token fences off anyway).
func (w *worker) dropLost(shards []int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range shards {
		if _, ok := w.held[s]; !ok {
			continue
		}
		delete(w.held, s)
		if r := w.running[s]; r != nil {
			r.lost = true
			r.cancel()
		}
		w.log.Warn().Int("shard", s).Msg("lease lost; the shard's running batch is cancelled and will not commit")
	}
}

// work runs a batch's keys through the handler and commits the outcome.
func (w *worker) work(b *fetched) {
	outcomes := make([]outcome, 0, len(b.keys))
	for _, t := range b.keys {
		stopped := b.ctx.Err() != nil
		var n int
		var err error
		if stopped {
			err = context.Canceled
		} else {
			n, err = w.perform(b, t)
			stopped = b.ctx.Err() != nil
		}
		o := decide(t, n, err, stopped, w.cfg.Clock.Now(), w.cfg.MaxRetryCount, w.cfg.RetryIn)
		if o.kind == "fail" {
			ev := w.log.Warn().Str("key", t.key).Int("shard", b.shard).Str("error", o.err).Str("retry_count", o.rc)
			if o.malformed {
				w.log.Error().Str("key", t.key).Int("shard", b.shard).Str("error", o.err).
					Msg("malformed payload: it goes to the morgue unchanged, without retries; the key's other jobs go on")
			} else if o.bury {
				ev.Msg("batch failed; its oldest payload goes to the morgue")
			} else {
				ev.Msg("batch failed; it will be retried")
			}
		}
		outcomes = append(outcomes, o)
	}
	w.commit(b, outcomes)
	w.mu.Lock()
	if r := w.running[b.shard]; r != nil {
		r.cancel()
		delete(w.running, b.shard)
	}
	w.mu.Unlock()
}

// perform builds the key's Batch and calls the handler, turning a panic
// into an error. A payload that is not a job (not a JSON object, or no
// class) cannot be handled, so retrying it is pointless: the jobs before
// it run, and it goes to the morgue at once, unchanged (a *malformedError).
func (w *worker) perform(b *fetched, t *taken) (n int, err error) {
	batch := &Batch{Queue: w.cfg.Queue, Key: t.key, Shard: b.shard, RetryCount: t.rc, Scores: t.scores}
	var bad *malformedError
	for i, p := range t.payloads {
		job, err := deliveredJob(w.cfg.Queue, t.key, p, t.scores[i], t.rc)
		if err != nil {
			bad = &malformedError{Done: i, Err: fmt.Errorf("ordered: payload %d of key %s (score %s) is not a job: %w", i+1, t.key, formatScore(t.scores[i]), err)}
			batch.Scores = batch.Scores[:i]
			break
		}
		batch.Jobs = append(batch.Jobs, job)
	}
	if len(batch.Jobs) > 0 {
		err = w.callHandler(b.ctx, batch)
	}
	if err == nil && bad != nil {
		err = bad
	}
	return len(t.payloads), err
}

func (w *worker) callHandler(ctx context.Context, batch *Batch) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("ordered: handler panic: %v\n%s", r, debug.Stack())
		}
	}()
	return w.cfg.Handler.Perform(ctx, batch)
}

// commit writes the batch's outcomes, retrying on Redis errors until it is
// written, fenced off, or the shard is no longer ours.
func (w *worker) commit(b *fetched, outcomes []outcome) {
	args := []any{w.keys.Prefix(), b.shard, w.cfg.Identity, b.token, w.cfg.Clock.Now().UnixMilli()}
	for _, o := range outcomes {
		args = append(args, o.args()...)
	}
	for attempt := 0; ; attempt++ {
		ok, err := w.commitOnce(args)
		if err == nil {
			if !ok {
				w.log.Warn().Int("shard", b.shard).Msg("commit refused: the shard's lease was taken over; its new owner runs the batch again")
				return
			}
			w.mu.Lock()
			for _, o := range outcomes {
				w.stats.done += int64(o.done)
				if o.kind == "fail" {
					w.stats.failed++
				}
			}
			w.mu.Unlock()
			return
		}
		w.mu.Lock()
		_, still := w.held[b.shard]
		w.mu.Unlock()
		if !still {
			w.log.Warn().Err(err).Int("shard", b.shard).Msg("commit failed and the lease is lost; the new owner runs the batch again")
			return
		}
		w.log.Warn().Err(err).Int("shard", b.shard).Int("attempt", attempt+1).Msg("commit failed; retrying")
		time.Sleep(min(time.Duration(attempt+1)*50*time.Millisecond, time.Second))
	}
}

func (w *worker) commitOnce(args []any) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := w.cfg.Pool.GetContext(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	n, err := redis.Int(orderedstore.CommitScript.DoContext(ctx, conn, args...))
	return n == 1, err
}
