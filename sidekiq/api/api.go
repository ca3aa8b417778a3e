package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/monoclock"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
	"github.com/gojob/gojob/sidekiq/wire"
)

// ErrKilledByAPI is the error death handlers receive for a job killed
// through the API (Ruby: RuntimeError "Job killed by API").
var ErrKilledByAPI = errors.New("sidekiq: job killed by API")

// ErrJobNotFound reports that a job looked up by jid, or an entry to move,
// is not (or no longer) in Redis. It is wrapped with the set or queue name
// and the jid.
var ErrJobNotFound = errors.New("sidekiq: job not found")

// ErrUnparsableJob reports an operation that needs the job's fields on an
// entry whose stored payload is not a JSON object (such entries end up in
// the dead set). The entry is left where it was.
var ErrUnparsableJob = errors.New("sidekiq: job payload is not a JSON object")

// Config configures an API.
type Config struct {
	// Pool is the Redis connection pool. Required.
	Pool *redis.Pool
	// Version is the Sidekiq release whose wire format is written (it
	// reaches the re-pushed jobs' enqueued_at through Client). Default
	// wire.Version6.
	Version wire.Version
	// Clock is the time source. Default the system clock.
	Clock clock.Clock
	// Client pushes the jobs that "retry now" and "add to queue" move back
	// into queues, running its client middleware as Ruby's Client.push
	// does. Default a Client on Pool with Version and Clock.
	Client *sidekiq.Client
	// DeathHandlers are called, in order, for each job killed through the
	// API (the dead set's Kill, SortedEntry.Kill, JobSet.KillAll) with
	// ErrKilledByAPI, unless KillOpts.SkipDeathHandlers is set, like Ruby's
	// Sidekiq.death_handlers. Handlers must treat the job as read-only.
	DeathHandlers []sidekiq.DeathHandler
	// DeadMaxJobs is Sidekiq's dead_max_jobs. Default DeadMaxJobs (10,000;
	// the trim keeps at most DeadMaxJobs-1 entries, as in Ruby).
	DeadMaxJobs int
	// DeadTimeout is Sidekiq's dead_timeout_in_seconds. Default
	// DeadTimeoutInSeconds (180 days).
	DeadTimeout time.Duration
}

func (c *Config) validate() error {
	if c.Pool == nil {
		return errors.New("sidekiq: Config.Pool is required")
	}
	if c.DeadMaxJobs < 0 {
		return errors.New("sidekiq: Config.DeadMaxJobs must not be negative")
	}
	if c.DeadTimeout < 0 {
		return errors.New("sidekiq: Config.DeadTimeout must not be negative")
	}
	return nil
}

// API reads and changes Sidekiq's data in Redis the way Ruby's
// Sidekiq::API (lib/sidekiq/api.rb) and the Web UI do: stats, queues, the
// retry / schedule / dead sets, processes and their busy jobs. Every write
// leaves Redis as Ruby Sidekiq 6.4.1 would. It is safe for concurrent use.
type API struct {
	pool     *redis.Pool
	version  wire.Version
	clock    clock.Clock
	client   *sidekiq.Client
	handlers []sidekiq.DeathHandler
	morgue   contract.MorgueLimits
}

// New returns an API.
func New(cfg *Config) (*API, error) {
	if cfg == nil {
		return nil, errors.New("sidekiq: nil Config")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	v := cmp.Or(cfg.Version, contract.DefaultVersion)
	clk := monoclock.Or(cfg.Clock)
	cl := cfg.Client
	if cl == nil {
		var err error
		cl, err = sidekiq.NewClient(&sidekiq.ClientConfig{Pool: cfg.Pool, Version: v, Clock: clk})
		if err != nil {
			return nil, err
		}
	}
	return &API{
		pool:     cfg.Pool,
		version:  v,
		clock:    clk,
		client:   cl,
		handlers: append([]sidekiq.DeathHandler(nil), cfg.DeathHandlers...),
		morgue:   contract.MorgueLimits{MaxJobs: cfg.DeadMaxJobs, Timeout: cfg.DeadTimeout},
	}, nil
}

// Client returns the client used for re-pushes.
func (a *API) Client() *sidekiq.Client { return a.client }

func (a *API) conn(ctx context.Context, op string) (redis.Conn, error) {
	c, err := a.pool.GetContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("sidekiq: %s: %w", op, err)
	}
	return c, nil
}

// connMembers returns a connection and the members of the set key, read
// with SSCAN; the connection is closed when it returns an error.
func (a *API) connMembers(ctx context.Context, op, key string) (redis.Conn, []string, error) {
	conn, err := a.conn(ctx, op)
	if err != nil {
		return nil, nil, err
	}
	members, err := redisx.SScanAll(ctx, conn, key)
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("sidekiq: %s: %w", op, err)
	}
	return conn, members, nil
}

// pageBounds checks the offset and limit of a page; limit 0 means 25 (the
// Web UI's page size).
func pageBounds(offset, limit int) (int, int, error) {
	if offset < 0 || limit < 0 {
		return 0, 0, errors.New("sidekiq: page offset and limit must not be negative")
	}
	if limit == 0 {
		limit = 25
	}
	return offset, limit, nil
}

// BulkActionResult reports a set-wide action (retry all, kill all, add
// all; JobSet.Bulk).
type BulkActionResult struct {
	// Total is how many entries JobSet.Bulk set out to act on: the set's
	// size, or its matches, when it began.
	Total int64
	// Moved counts the entries removed from the set and pushed, killed or
	// deleted.
	Moved int
	// Gone counts the entries that left the set meanwhile (processed,
	// moved or deleted elsewhere) before the action reached them.
	Gone int
	// Left counts, for JobSet.Bulk, the entries left in place because
	// their payload is not a job.
	Left int
	// Dropped counts, for KillAll, the dead-set entries its limits removed
	// to make room (API.DeadLimits): the oldest dead jobs, or the first
	// killed ones when more were killed than the cap holds.
	Dropped int64
	// Remaining is the set's size at the end: entries that could not be
	// moved (unparsable payloads are left in place) or that arrived
	// meanwhile.
	Remaining int64
}
