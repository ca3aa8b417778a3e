package durable

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/lease"
	"github.com/gojob/gojob/internal/tick"
	"github.com/gojob/gojob/sidekiq"
)

// defaultLeaseKey is the Redis key of the reconciler's leader lease.
const defaultLeaseKey = "gojob:durable:reconciler-leader"

// defaultPollInterval is how often the leader reconciles (webhookdb runs
// its poller every 3 minutes).
const defaultPollInterval = 3 * time.Minute

// PollerConfig configures the poller NewPoller returns.
type PollerConfig struct {
	// Reconciler runs the passes. Required.
	Reconciler *Reconciler
	// Pool is the Redis pool holding the lease. Required.
	Pool *redis.Pool
	// Identity names this process in the lease. Default host:pid:nonce
	// (pass Server.Identity() to match the Web UI).
	Identity string
	// Interval is the time between passes. Default 3 minutes.
	Interval time.Duration
	// LeaseKey is the lease's Redis key. Default defaultLeaseKey.
	LeaseKey string
	// MaxPass bounds one pass: the lease is renewed while a pass runs, so
	// a pass that makes no progress (a hung connection, a failure notifier
	// that never returns) is cancelled after MaxPass and the lease lapses.
	// Default ten intervals.
	MaxPass time.Duration
	// Logger receives a line per failed pass. Default the Reconciler's.
	Logger *zerolog.Logger
}

func (c *PollerConfig) validate() error {
	if c.Reconciler == nil {
		return errors.New("durable: PollerConfig.Reconciler is required")
	}
	if c.Pool == nil {
		return errors.New("durable: PollerConfig.Pool is required")
	}
	if c.Interval < 0 || c.MaxPass < 0 {
		return errors.New("durable: PollerConfig.Interval and MaxPass must not be negative")
	}
	return nil
}

// poller runs the reconciler periodically; see NewPoller.
type poller struct {
	cfg  PollerConfig
	log  zerolog.Logger
	ttl  time.Duration
	mu   sync.Mutex
	stop chan struct{}
	done chan struct{}
}

// NewPoller returns the service that runs the reconciler periodically in
// every process that has one (srv.Serve(poller)), with leader election
// through a Redis lease, so that one process polls at a time: each
// interval, a process takes the lease if it is free or renews it if it
// holds it (time to live: two intervals), and reconciles only while it
// holds it. During a pass the leader renews the lease every half interval,
// so a pass longer than the time to live does not let a second process
// start one; a leader that finds the lease taken stops its pass, and a
// pass is cancelled after MaxPass. A leader that dies is replaced when its
// lease expires; one that stops releases it.
//
// Start runs a first pass after a random delay of up to 5 seconds, then
// one per interval (±10%); Stop ends the loop, waits for a running pass
// (bounded by its context) and releases the lease if this process holds
// it.
func NewPoller(cfg *PollerConfig) (sidekiq.Service, error) {
	p, err := newPoller(cfg)
	if err != nil {
		return nil, err
	}
	return p, nil
}

func newPoller(cfg *PollerConfig) (*poller, error) {
	if cfg == nil {
		return nil, errors.New("durable: nil PollerConfig")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := *cfg
	c.Interval = cmp.Or(c.Interval, defaultPollInterval)
	c.LeaseKey = cmp.Or(c.LeaseKey, defaultLeaseKey)
	c.MaxPass = cmp.Or(c.MaxPass, 10*c.Interval)
	if c.Identity == "" {
		host, _ := os.Hostname()
		c.Identity = fmt.Sprintf("%s:%d:%s", host, os.Getpid(), contract.NewJID()[:12])
	}
	p := &poller{cfg: c, log: c.Reconciler.log, ttl: 2 * c.Interval}
	if c.Logger != nil {
		p.log = *c.Logger
	}
	return p, nil
}

// errPollerRunning is returned by Start on a poller already started.
var errPollerRunning = errors.New("durable: poller already started")

// Start starts the loop (see NewPoller).
func (p *poller) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stop != nil {
		return errPollerRunning
	}
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer close(p.done)
		defer cancel()
		go func() {
			select {
			case <-p.stop:
				cancel()
			case <-loopCtx.Done():
			}
		}()
		wait := time.Duration(rand.Float64() * float64(min(5*time.Second, p.cfg.Interval)))
		for {
			t := time.NewTimer(wait)
			select {
			case <-loopCtx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			if _, err := p.runOnce(loopCtx); err != nil && loopCtx.Err() == nil {
				p.log.Error().Err(err).Str("component", "durable-reconciler").Msg("reconcile pass failed")
			}
			wait = time.Duration(float64(p.cfg.Interval) * (0.9 + 0.2*rand.Float64()))
		}
	}()
	return nil
}

// Stop ends the loop (see NewPoller).
func (p *poller) Stop(ctx context.Context) error {
	p.mu.Lock()
	stop, done := p.stop, p.done
	p.mu.Unlock()
	if stop == nil {
		return nil
	}
	select {
	case <-stop:
	default:
		close(stop)
	}
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	conn, err := p.cfg.Pool.GetContext(ctx)
	if err != nil {
		return fmt.Errorf("durable: release lease: %w", err)
	}
	defer conn.Close()
	if _, err := lease.Release(ctx, conn, p.cfg.LeaseKey, p.cfg.Identity); err != nil {
		return fmt.Errorf("durable: release lease: %w", err)
	}
	return nil
}

// pollOutcome is one tick of the poller.
type pollOutcome struct {
	// leader is true when this process held the lease and reconciled.
	leader bool
	result *ReconcileResult
}

// errLeaseLost cancels a pass whose leader found the lease held by another
// process.
var errLeaseLost = errors.New("durable: reconciler lease taken by another process; pass stopped")

// runOnce takes or renews the lease and, as leader, runs one pass while
// renewing the lease (bounded by MaxPass).
func (p *poller) runOnce(ctx context.Context) (*pollOutcome, error) {
	held, err := p.acquire(ctx)
	if err != nil {
		return nil, err
	}
	if !held {
		return &pollOutcome{}, nil
	}
	passCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	passCtx, cancelTimeout := context.WithTimeout(passCtx, p.cfg.MaxPass)
	defer cancelTimeout()
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		p.keepLease(passCtx, cancel)
	}()
	res, err := p.cfg.Reconciler.RunOnce(passCtx)
	// A pass cut short (lease lost, MaxPass) may have stopped quietly
	// between two statements: report why.
	if ctx.Err() == nil && passCtx.Err() != nil {
		if cause := context.Cause(passCtx); !errors.Is(err, cause) {
			err = errors.Join(err, fmt.Errorf("durable: reconcile pass: %w", cause))
		}
	}
	cancel(nil)
	<-kept
	return &pollOutcome{leader: true, result: res}, err
}

// keepLease renews the lease every half interval until ctx ends, and
// cancels the pass if another process holds the lease. A renewal that
// fails (Redis unreachable) is tried again at the next tick.
func (p *poller) keepLease(ctx context.Context, cancel context.CancelCauseFunc) {
	tick.Every(ctx, max(p.cfg.Interval/2, time.Millisecond), func() bool {
		held, err := p.acquire(ctx)
		if err != nil {
			if ctx.Err() == nil {
				p.log.Warn().Err(err).Str("component", "durable-reconciler").Msg("could not renew the reconciler lease")
			}
			return true
		}
		if !held {
			cancel(errLeaseLost)
		}
		return held
	})
}

func (p *poller) acquire(ctx context.Context) (bool, error) {
	conn, err := p.cfg.Pool.GetContext(ctx)
	if err != nil {
		return false, fmt.Errorf("durable: lease: %w", err)
	}
	defer conn.Close()
	held, err := lease.Acquire(ctx, conn, p.cfg.LeaseKey, p.cfg.Identity, p.ttl)
	if err != nil {
		return false, fmt.Errorf("durable: lease: %w", err)
	}
	return held, nil
}
