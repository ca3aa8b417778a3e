package jobctl

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/tick"
	"github.com/gojob/gojob/sidekiq"
)

// CancelledError is the cause of a cancelled job's context, and the error
// the job ends with (error_class Gojob::Cancelled).
type CancelledError struct {
	// JID is the job cancelled.
	JID string
	// Err is what the handler returned after the cancellation, if
	// anything.
	Err error
}

func (e *CancelledError) Error() string {
	if e.Err == nil {
		return "job " + e.JID + " cancelled"
	}
	return "job " + e.JID + " cancelled: " + e.Err.Error()
}

// Unwrap returns what the handler returned.
func (e *CancelledError) Unwrap() error { return e.Err }

// ErrorClass is the job's error_class in the dead set.
func (e *CancelledError) ErrorClass() string { return "Gojob::Cancelled" }

// Config configures the job control New returns.
type Config struct {
	// Pool is the Redis pool. Required.
	Pool *redis.Pool
	// Server is the server whose jobs are cancelled. Required.
	Server *sidekiq.Server
	// PollInterval is how often the cancel keys of the running jobs are
	// checked, besides the channel's wake-ups. Default one second.
	PollInterval time.Duration
	// Logger logs a lost subscription and failed checks. Default none.
	Logger zerolog.Logger
}

func (c *Config) validate() error {
	if c.Pool == nil {
		return errors.New("jobctl: Config.Pool is required")
	}
	if c.Server == nil {
		return errors.New("jobctl: Config.Server is required")
	}
	if c.PollInterval < 0 {
		return errors.New("jobctl: Config.PollInterval must not be negative")
	}
	return nil
}

// control is the job control; see New.
type control struct {
	cfg Config

	mu   sync.Mutex
	stop context.CancelFunc
	done chan struct{}
}

// New returns the job control of cfg.Server, a service (srv.Serve(ctl))
// that cancels the server's jobs on request: between its Start and Stop it
// runs a subscription to the cancel channel and a check of the running
// jobs' cancel keys, and asks the server to cancel the jobs asked for
// (sidekiq.Server.CancelRunning). A job it does not cancel costs it
// nothing.
func New(cfg *Config) (sidekiq.Service, error) {
	c, err := newControl(cfg)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func newControl(cfg *Config) (*control, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &control{cfg: *cfg}
	if c.cfg.PollInterval == 0 {
		c.cfg.PollInterval = time.Second
	}
	return c, nil
}

// cancel cancels the running job jid; it reports whether it ran here. The
// job's context ends with a *CancelledError. A cancelled job whose handler
// returns an error ends as a *CancelledError through sidekiq.Kill: the
// dead set, no retry. A handler that returns nil despite the cancellation
// succeeded.
func (c *control) cancel(jid string) bool {
	return c.cfg.Server.CancelRunning(jid, &CancelledError{JID: jid}, func(err error) error {
		// Done with: a retry of the job from the dead set must not be
		// cancelled again by the same request. A cancelled iterable job's
		// state goes too, as Sidekiq unlinks it when the job ends
		// cancelled (lib/sidekiq/job/iterable.rb).
		conn := c.cfg.Pool.Get()
		conn.Do("DEL", contract.CancelKey(jid), contract.IterationKey(jid))
		conn.Close()
		if err == nil {
			return nil
		}
		return sidekiq.Kill(&CancelledError{JID: jid, Err: err})
	})
}

// Start starts the subscription to the cancel channel and the check of
// the running jobs' cancel keys.
func (c *control) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stop != nil {
		return errors.New("jobctl: already started")
	}
	ctx, c.stop = context.WithCancel(context.WithoutCancel(ctx))
	c.done = make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.subscribe(ctx) }()
	go func() { defer wg.Done(); c.poll(ctx) }()
	go func() { wg.Wait(); close(c.done) }()
	return nil
}

// Stop stops the loops, waiting for them within ctx.
func (c *control) Stop(ctx context.Context) error {
	c.mu.Lock()
	stop, done := c.stop, c.done
	c.mu.Unlock()
	if stop == nil {
		return nil
	}
	stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// subscribe listens on the cancel channel, resubscribing after a lost
// connection.
func (c *control) subscribe(ctx context.Context) {
	log := c.cfg.Logger.With().Str("component", "jobctl").Logger()
	for ctx.Err() == nil {
		err := c.subscribeOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		log.Warn().Err(err).Msg("cancel subscription lost; cancel keys are still checked every poll")
		select {
		case <-ctx.Done():
		case <-time.After(c.cfg.PollInterval):
		}
	}
}

func (c *control) subscribeOnce(ctx context.Context) error {
	conn, err := c.cfg.Pool.GetContext(ctx)
	if err != nil {
		return err
	}
	psc := redis.PubSubConn{Conn: conn}
	defer psc.Close()
	if err := psc.Subscribe(contract.CancelChannel); err != nil {
		return err
	}
	for { // ReceiveContext returns when ctx ends
		switch m := psc.ReceiveContext(ctx).(type) {
		case redis.Message:
			c.cancel(string(m.Data))
		case redis.Subscription:
			if m.Count == 0 {
				return ctx.Err()
			}
		case error:
			return m
		}
	}
}

// poll checks the cancel keys of the running jobs every PollInterval.
func (c *control) poll(ctx context.Context) {
	tick.Every(ctx, c.cfg.PollInterval, func() bool {
		if _, err := c.runOnce(ctx); err != nil && ctx.Err() == nil {
			c.cfg.Logger.Warn().Str("component", "jobctl").Err(err).Msg("check of cancel requests failed")
		}
		return true
	})
}

// runOnce cancels the running jobs that have a cancel key; it returns
// their jids.
func (c *control) runOnce(ctx context.Context) ([]string, error) {
	jids := c.cfg.Server.RunningJIDs()
	if len(jids) == 0 {
		return nil, nil
	}
	args := make([]any, 0, 1+2*len(jids))
	args = append(args, 2*len(jids))
	for _, jid := range jids {
		args = append(args, contract.CancelKey(jid), contract.IterationKey(jid))
	}
	conn, err := c.cfg.Pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	asked, err := redis.Ints(checkScript.DoContext(ctx, conn, args...))
	if err != nil {
		return nil, fmt.Errorf("jobctl: check cancel requests: %w", err)
	}
	var out []string
	for _, i := range asked {
		if i >= 1 && i <= len(jids) && c.cancel(jids[i-1]) {
			out = append(out, jids[i-1])
		}
	}
	return out, nil
}

// checkScript finds the running jobs asked to cancel, by gojob
// (gojob-cancel:<jid>) or by Sidekiq's cancel! (the field "cancelled" of
// it-<jid>), for every running job in one command per poll.
//
// KEYS: gojob-cancel:<jid>, it-<jid>, for each job. Returns the 1-based
// positions of the jobs asked.
var (
	//go:embed lua/check_cancel.lua
	checkLua    string
	checkScript = redis.NewScript(-1, checkLua)
)
