package durable

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/durable/internal/store"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

var (
	//go:embed lua/outbox_push.lua
	outboxPushLua string
	outboxPush    = redis.NewScript(4, outboxPushLua)
)

// outboxMarkerTTL is how long Redis remembers that a relay pushed a jid.
// A relay pushes a row and clears its mark at once; the marker covers a
// relay that dies in between, until another relay's lease of the row
// (RelayConfig.Lease) ends and it finds the marker. A day leaves room for
// a database that stays unreachable long after the push.
const outboxMarkerTTL = 24 * time.Hour

// outboxBatch is how many rows a relay leases at a time.
const outboxBatch = 100

// outboxKey is the context key a relay's pushes carry: their rows exist.
type outboxKey struct{}

// RelayConfig configures the relay NewRelay returns.
type RelayConfig struct {
	// Durable holds the rows Enqueue wrote. Required.
	Durable *Durable
	// Client pushes the jobs: its middleware and extensions run as for
	// any push (the Durable's BeforePush leaves these jobs alone: their
	// row exists). Required.
	Client *sidekiq.Client
	// Lease is how long a relay holds the rows it took before another
	// relay may take them (when it died before pushing them). Default 30 s.
	Lease time.Duration
	// PollInterval is the time between scans when nothing wakes the relay:
	// PostgreSQL wakes it at each commit of an outbox row (LISTEN), SQLite
	// has no notifications. Default 50 ms with a SQLite database, else 1 s.
	PollInterval time.Duration
	// Logger receives the relay's errors. Default: none.
	Logger zerolog.Logger
}

// relay pushes the outbox's committed rows; see NewRelay.
type relay struct {
	cfg  RelayConfig
	log  zerolog.Logger
	wake chan struct{}

	mu     sync.Mutex
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// NewRelay checks cfg and returns the relay, a service (srv.Serve(relay))
// that pushes the jobs that Enqueue wrote in committed transactions to
// Redis, each once, and makes their rows ordinary durable rows. Start
// runs it in the background until Stop or the end of Start's context;
// Stop ends it and waits for its pass in progress, within its context.
// Several relays (one per `gojob work --durable` process) share the work:
// a row is leased by one relay at a time (FOR UPDATE SKIP LOCKED on
// PostgreSQL), and a push and a marker of its jid are one Redis step, so
// a relay that dies between the push and the update of the row leaves a
// row the next relay clears without pushing it again. See
// docs/durable.md, "Outbox".
func NewRelay(cfg *RelayConfig) (sidekiq.Service, error) {
	r, err := newRelay(cfg)
	if err != nil {
		return nil, err
	}
	return r, nil
}

func newRelay(cfg *RelayConfig) (*relay, error) {
	if cfg == nil || cfg.Durable == nil || cfg.Client == nil {
		return nil, errors.New("durable: RelayConfig needs Durable and Client")
	}
	if cfg.Lease < 0 || cfg.PollInterval < 0 {
		return nil, errors.New("durable: negative RelayConfig durations")
	}
	c := *cfg
	c.Lease = cmp.Or(c.Lease, 30*time.Second)
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
		for _, s := range c.Durable.stores {
			if s.Kind() == "sqlite" {
				c.PollInterval = 50 * time.Millisecond
			}
		}
	}
	return &relay{cfg: c, log: c.Logger, wake: make(chan struct{}, 1)}, nil
}

// Start runs the relay (see NewRelay).
func (r *relay) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil {
		return errors.New("durable: relay already started")
	}
	ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	for _, s := range r.cfg.Durable.stores {
		if s.Kind() != "postgres" {
			continue
		}
		r.done.Add(1)
		go func() {
			defer r.done.Done()
			r.listen(ctx, s)
		}()
	}
	r.done.Add(1)
	go func() {
		defer r.done.Done()
		r.loop(ctx)
	}()
	return nil
}

// Stop ends the relay (see NewRelay).
func (r *relay) Stop(ctx context.Context) error {
	r.mu.Lock()
	cancel := r.cancel
	r.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	done := make(chan struct{})
	go func() { r.done.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *relay) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// listen wakes the relay at each notification of a database, and once
// each time it (re)connects, for the commits it may have missed.
func (r *relay) listen(ctx context.Context, s store.Store) {
	delay := time.Second
	for ctx.Err() == nil {
		err := s.OutboxListen(ctx, func() { delay = time.Second; r.signal() }, r.signal)
		if ctx.Err() != nil {
			return
		}
		r.log.Warn().Err(err).Str("component", "durable-relay").Str("database", s.Name()).
			Msg("outbox notifications lost; listening again (polling meanwhile)")
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		delay = min(2*delay, 30*time.Second)
	}
}

func (r *relay) loop(ctx context.Context) {
	t := time.NewTicker(r.cfg.PollInterval)
	defer t.Stop()
	backoff := time.Duration(0)
	for {
		if _, err := r.runOnce(ctx); err != nil && ctx.Err() == nil {
			// A database or Redis that fails is tried again after 1 s, then
			// up to 30 s; the log says so once per outage, and once when it
			// ends.
			lvl := zerolog.ErrorLevel
			if backoff > 0 {
				lvl = zerolog.DebugLevel
			}
			backoff = min(max(2*backoff, time.Second), 30*time.Second)
			r.log.WithLevel(lvl).Err(err).Str("component", "durable-relay").Str("retry_in", backoff.String()).
				Msg("outbox pass failed; retrying with backoff")
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			continue
		}
		if backoff > 0 {
			r.log.Info().Str("component", "durable-relay").Msg("outbox passes work again")
		}
		backoff = 0
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-t.C:
		}
	}
}

// relayResult reports a pass.
type relayResult struct {
	// Pushed counts the jobs pushed, Duplicates the rows whose jid a
	// relay had pushed already (its marker was in Redis).
	Pushed, Duplicates int
}

// runOnce pushes every row to push it can lease, in every database.
func (r *relay) runOnce(ctx context.Context) (*relayResult, error) {
	res := &relayResult{}
	var errs []error
	for _, s := range r.cfg.Durable.stores {
		for ctx.Err() == nil {
			n, err := r.batch(ctx, s, res)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", s.Name(), err))
				break
			}
			if n < outboxBatch {
				break
			}
		}
	}
	return res, errors.Join(errs...)
}

// batch leases up to outboxBatch rows of s, pushes them and clears their
// mark. It returns how many rows it leased.
func (r *relay) batch(ctx context.Context, s store.Store, res *relayResult) (int, error) {
	now := r.cfg.Durable.cfg.Clock.Now()
	rows, err := s.OutboxLease(ctx, store.OutboxLeaseParams{Now: now, Until: now.Add(r.cfg.Lease), Limit: outboxBatch})
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	done := make([]string, 0, len(rows))
	var pushErr error
	for _, row := range rows {
		pushed, err := r.push(ctx, s, row)
		var bad *badRowError
		if errors.As(err, &bad) {
			r.log.Error().Err(bad.err).Str("component", "durable-relay").Str("jid", bad.jid).Str("database", s.Name()).
				Msg("outbox row cannot be pushed; it is kept and tried again when its lease ends")
			continue
		}
		if err != nil {
			// Redis did not answer: the rest keep their lease and are
			// pushed when it ends.
			pushErr = err
			break
		}
		if pushed {
			res.Pushed++
		} else {
			res.Duplicates++
		}
		done = append(done, row.JobID)
	}
	if err := s.OutboxPushed(context.WithoutCancel(ctx), done); err != nil {
		// The jobs are in Redis and their markers too: the next lease
		// clears the mark without pushing them again.
		return len(rows), errors.Join(pushErr, err)
	}
	return len(rows), pushErr
}

// push pushes a row's job once (the marker of its jid in the same Lua
// step). It reports false when the marker was there. A row whose JSON
// cannot be read keeps its mark and is reported at each lease (nothing
// is lost; an operator fixes or deletes it); a row whose push a client
// middleware stopped is deleted, as the client drops such a job.
func (r *relay) push(ctx context.Context, s store.Store, row *store.OutboxRow) (pushed bool, err error) {
	job, err := wire.ParseJob([]byte(row.ItemJSON))
	if err == nil && job.JID() != row.JobID {
		err = fmt.Errorf("jid %q differs from job_id", job.JID())
	}
	if err != nil {
		return false, &badRowError{jid: row.JobID, err: err}
	}
	score := ""
	if at, ok := runAtOf(job); ok && contract.FromEpochSeconds(at).After(r.cfg.Durable.cfg.Clock.Now()) {
		score = contract.Score(contract.FromEpochSeconds(at))
	}
	job.Delete("at")
	queue, payload, ok, err := r.cfg.Client.PushPayload(context.WithValue(ctx, outboxKey{}, true), job)
	if err != nil {
		return false, &badRowError{jid: row.JobID, err: err}
	}
	if !ok {
		r.log.Info().Str("component", "durable-relay").Str("jid", row.JobID).Str("database", s.Name()).
			Msg("a client middleware stopped the push of an outbox job; its row is deleted")
		_, err := s.DeleteJob(context.WithoutCancel(ctx), row.JobID)
		return true, err
	}
	if score != "" {
		job.Delete("enqueued_at")
		payload = job.Bytes()
	}
	conn, err := r.cfg.Client.Pool().GetContext(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	n, err := redis.Int(outboxPush.DoContext(ctx, conn, "gojob:outbox:"+row.JobID, contract.KeyQueues, contract.QueueKey(queue),
		contract.KeySchedule, payload, queue, int64(outboxMarkerTTL/time.Second), score))
	if err != nil {
		return false, fmt.Errorf("push %s: %w", row.JobID, err)
	}
	return n == 1, nil
}

// badRowError is an outbox row that cannot become a job.
type badRowError struct {
	jid string
	err error
}

func (e *badRowError) Error() string { return "outbox row " + e.jid + ": " + e.err.Error() }
