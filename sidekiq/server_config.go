package sidekiq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/fetchmode"
	"github.com/gojob/gojob/internal/monoclock"
	"github.com/gojob/gojob/internal/tuning"
	"github.com/gojob/gojob/sidekiq/wire"
)

// defaultFetchAheadHold is how long a job fetched ahead waits for its slot
// before it goes back to its queue unless ServerConfig.FetchAheadHold says
// otherwise.
const defaultFetchAheadHold = 25 * time.Millisecond

// ServerConfig configures a Server.
type ServerConfig struct {
	// Pool is the Redis pool for everything but the fetchers. Required.
	Pool *redis.Pool
	// Dial opens the fetch connections, which are not pooled (see
	// FetchPipeline). Default: Pool.DialContext / Pool.Dial.
	Dial func(ctx context.Context) (redis.Conn, error)
	// Queues to fetch from, in order, with optional weights
	// (docs/sidekiq-wire.md#fetch). Default: [default].
	Queues []wire.QueueWeight
	// Concurrency is the number of jobs run at once. Default 10 (Sidekiq 6.4
	// uses 10 too).
	Concurrency int
	// QueueConcurrency caps, per queue name, how many of the Concurrency
	// slots run jobs of that queue at once (1 to Concurrency-1); the other
	// slots keep taking the other queues. Sidekiq 7's capsules give a queue
	// slots of its own; here the cap shares the process's slots, so a capped
	// queue that is empty leaves its slots to the others. Reliable fetch
	// only (docs/queue-concurrency.md).
	QueueConcurrency map[string]int
	// Fetch names how jobs are taken from the queues, as gojob work
	// --fetch does (any case):
	//
	//   - "basic" (or "brpop", or "": the default) is Sidekiq's
	//     BasicFetch: every idle concurrency slot has one
	//     `BRPOP queue:a queue:b … 2` in Redis, one BRPOP per job. The
	//     BRPOPs of up to FetchPipeline slots share a connection as a
	//     pipeline.
	//   - "batch" (or "blmpop") takes, in one
	//     `BLMPOP 2 n queue:a … RIGHT COUNT k` (Redis 7.0+), as many jobs
	//     as there are idle slots, from the first non-empty queue in the
	//     same order BRPOP would use. A job is only popped when a slot is
	//     free to run it, so a crash loses exactly what BasicFetch loses
	//     (the jobs being run), but a busy process needs far fewer round
	//     trips. On a Redis without BLMPOP it falls back to basic.
	//   - "reliable" keeps every job in Redis until its outcome is
	//     written: a job moves atomically from its queue into this
	//     process's in-progress hash and leaves it with its
	//     acknowledgement or, in the same script, its retry or dead entry.
	//     The jobs of a process that dies (kill -9, OOM, a lost node) are
	//     pushed back to their queues by the live processes, so no job is
	//     lost. One script call takes the jobs of all idle slots and
	//     acknowledges the finished ones (docs/reliable-fetch.md).
	//
	// Another name fails NewServer.
	Fetch string
	// RecoveryLimit is, with reliable fetch, how many times a job may be
	// recovered from a dead process before it is a poison pill and goes to
	// the dead set. Default 3.
	RecoveryLimit int
	// RecoveryInterval is, with reliable fetch, the time between passes
	// that recover the in-progress lists of dead processes. Default 15 s.
	RecoveryInterval time.Duration
	// FetchPipeline is, in BRPOP mode, how many idle slots' BRPOPs one
	// fetch connection carries at once, pipelined; the server opens
	// ceil(Concurrency/FetchPipeline) fetch connections. 1 gives each slot
	// its own connection and round trips, as Ruby does. Default 8.
	FetchPipeline int
	// FetchAhead is, with reliable fetch, how many jobs a busy slot holds
	// fetched ahead at most: its next jobs, moved to its in-progress list
	// while it runs a short one, so that it starts them without a round
	// trip. Only a process whose slots are all busy fetches ahead (and a
	// job that calls Run.FetchAhead); a job fetched ahead goes back to the
	// pop end of its queue when its slot has not started it within 25 ms,
	// and a slot whose last job took 5 ms or more fetches none
	// (docs/reliable-fetch.md). 0 means 16; a negative value
	// turns it off.
	FetchAhead int
	// FetchAheadHold is, with reliable fetch, how long a job fetched ahead
	// waits for its slot before it goes back to its queue; a slot whose
	// last job took a fifth of it or more fetches none ahead, and a slot
	// holds no more than it runs within half of it at the pace of its last
	// job. 0 means 25 ms. A longer hold suits a Redis far
	// away, and tests that must see jobs fetched ahead on a loaded machine.
	FetchAheadHold time.Duration
	// ShutdownTimeout bounds the wait for running jobs at stop (-t). Default
	// 25 s.
	ShutdownTimeout time.Duration
	// JobTimeout is the total timeout of the jobs whose payload has no
	// "timeout" key (docs/heartbeats.md): a job that runs longer is
	// cancelled and fails with Gojob::Timeout. 0: no default timeout.
	JobTimeout time.Duration
	// CancelGrace is how long a handler cancelled for a missed deadline
	// (timeout, heartbeat_timeout) has to return before its slot is freed
	// and it is left running. Default 5 s.
	CancelGrace time.Duration
	// Version is the Sidekiq release whose format is written. Default
	// wire.Version6. Ignored with FollowVersion.
	Version wire.Version
	// FollowVersion makes the server follow the cluster: it decides its
	// format at Start and again before every heartbeat (contract.DecideFormat:
	// the oldest live Ruby process, else the recorded format, else what
	// Ruby left in Redis, else a format every reader shows) and switches
	// when the decision changes (docs/version-follow.md).
	FollowVersion bool
	// ForceVersion lets Start write a Version that live Ruby processes
	// cannot read (8.x millisecond timestamps where a 7.x or 6.x process
	// or Web UI reads them). Without it Start refuses with
	// an error.
	ForceVersion bool
	// MaxRetries is the retry count for `"retry": true`. Default 25.
	MaxRetries int
	// Tag is the process tag shown in the Web UI (-g).
	Tag string
	// Labels are shown in the Web UI.
	Labels []string
	// Hostname overrides the host name in the identity.
	Hostname string
	// Client pushes the poller's re-enqueues. Default: a client on Pool
	// with Version. The server adds its Extensions to it.
	Client *Client
	// Extensions take part in the jobs' life where a middleware cannot
	// (Extension): durable jobs, for instance. They run outside the
	// middleware, first listed outermost.
	Extensions []Extension
	// Clock is the time source. Default the system clock.
	Clock clock.Clock
	// Logger receives the runtime's logs. Default: none.
	Logger zerolog.Logger
	// DeathHandlers run when a job dies.
	DeathHandlers []DeathHandler
	// PollIntervalAverage, when set, replaces the scaled scheduled-poll
	// interval (Sidekiq's average_scheduled_poll_interval × processes).
	PollIntervalAverage time.Duration
	// DisablePoller turns off the scheduled/retry poller.
	DisablePoller bool
	// HeartbeatInterval overrides the version's beat (5 s for 6.x, 10 s for
	// 7.x/8.x). For tests.
	HeartbeatInterval time.Duration
	// OnSignal is called for every signal read from the signals list or sent
	// with Signal (after the Server acted on it).
	OnSignal func(sig string)
}

func (c *ServerConfig) withDefaults() *ServerConfig {
	out := *c
	if mode, err := fetchmode.Parse(out.Fetch); err == nil {
		out.Fetch = mode // validate reports another name
	}
	if len(out.Queues) == 0 {
		out.Queues = []wire.QueueWeight{{Name: "default"}}
	}
	if out.Concurrency <= 0 {
		out.Concurrency = 10
	}
	if out.FetchPipeline <= 0 {
		out.FetchPipeline = tuning.FetchPipeline
	}
	if out.FetchAheadHold == 0 {
		out.FetchAheadHold = defaultFetchAheadHold
	}
	if out.ShutdownTimeout <= 0 {
		out.ShutdownTimeout = 25 * time.Second
	}
	out.Version = cmp.Or(out.Version, contract.DefaultVersion)
	if out.CancelGrace <= 0 {
		out.CancelGrace = tuning.CancelGrace
	}
	if out.MaxRetries <= 0 {
		out.MaxRetries = 25
	}
	out.Clock = monoclock.Or(out.Clock)
	out.QueueConcurrency = maps.Clone(out.QueueConcurrency)
	if out.Hostname == "" {
		out.Hostname = os.Getenv("DYNO")
	}
	if out.Hostname == "" {
		out.Hostname, _ = os.Hostname()
	}
	if out.Dial == nil && out.Pool != nil {
		p := out.Pool
		out.Dial = func(ctx context.Context) (redis.Conn, error) {
			if p.DialContext != nil {
				return p.DialContext(ctx)
			}
			return p.Dial()
		}
	}
	return &out
}

func (c *ServerConfig) validate() error {
	if c.Pool == nil {
		return errors.New("sidekiq: ServerConfig.Pool is required")
	}
	for _, e := range c.Extensions {
		if !hasHook(e) {
			return errNoHook(e)
		}
	}
	for _, q := range c.Queues {
		if q.Name == "" {
			return errors.New("sidekiq: empty queue name")
		}
	}
	if _, err := fetchmode.Parse(c.Fetch); err != nil {
		return err
	}
	if err := validateQueueConcurrency(c.withDefaults()); err != nil {
		return err
	}
	if c.FetchAheadHold < 0 {
		return fmt.Errorf("sidekiq: negative FetchAheadHold %v", c.FetchAheadHold)
	}
	return nil
}

// validateQueueConcurrency checks ServerConfig.QueueConcurrency against
// the queues and the concurrency.
func validateQueueConcurrency(c *ServerConfig) error {
	if len(c.QueueConcurrency) > 0 && c.Fetch != fetchmode.Reliable {
		// A blocking fetch (BRPOP, BLMPOP) issued while a capped queue was
		// full keeps skipping it until the command times out (2 s, longer
		// behind the other BRPOPs of its pipeline): the capped queue would
		// crawl whenever the other queues are idle. The reliable fetch
		// picks its queue afresh for every move and rechecks parked slots
		// every 100 ms.
		return fmt.Errorf("sidekiq: queue concurrency needs the reliable fetch (the %s fetch blocks on its queues)", c.Fetch)
	}
	for q, n := range c.QueueConcurrency {
		found := false
		for _, qw := range c.Queues {
			found = found || qw.Name == q
		}
		if !found {
			return fmt.Errorf("sidekiq: queue concurrency of %q: not one of the queues processed", q)
		}
		if n < 1 || n >= c.Concurrency {
			return fmt.Errorf("sidekiq: queue concurrency of %q is %d: want 1 to %d (less than the concurrency)", q, n, c.Concurrency-1)
		}
	}
	return nil
}
