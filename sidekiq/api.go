package sidekiq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/clock"
	"github.com/gojob/gojob/sidekiq/rubyjson"
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

// APIConfig configures an API.
type APIConfig struct {
	// Pool is the Redis connection pool. Required.
	Pool *redis.Pool
	// Version is the Sidekiq release whose wire format is written (it
	// reaches the re-pushed jobs' enqueued_at through Client). Default
	// DefaultVersion.
	Version Version
	// Clock is the time source. Default the system clock.
	Clock clock.Clock
	// Client pushes the jobs that "retry now" and "add to queue" move back
	// into queues, running its client middleware as Ruby's Client.push
	// does. Default a Client on Pool with Version and Clock.
	Client *Client
	// DeathHandlers are called, in order, for each job killed through the
	// API (DeadSet.Kill, SortedEntry.Kill, RetrySet.KillAll) with
	// ErrKilledByAPI, unless KillOpts.SkipDeathHandlers is set, like Ruby's
	// Sidekiq.death_handlers. Handlers must treat the job as read-only.
	DeathHandlers []DeathHandler
	// DeadMaxJobs is Sidekiq's dead_max_jobs. Default DeadMaxJobs (10,000;
	// the trim keeps at most DeadMaxJobs-1 entries, as in Ruby).
	DeadMaxJobs int
	// DeadTimeout is Sidekiq's dead_timeout_in_seconds. Default
	// DeadTimeoutInSeconds (180 days).
	DeadTimeout time.Duration
}

func (c *APIConfig) validate() error {
	if c.Pool == nil {
		return errors.New("sidekiq: APIConfig.Pool is required")
	}
	if c.DeadMaxJobs < 0 {
		return errors.New("sidekiq: APIConfig.DeadMaxJobs must not be negative")
	}
	if c.DeadTimeout < 0 {
		return errors.New("sidekiq: APIConfig.DeadTimeout must not be negative")
	}
	return nil
}

// API reads and changes Sidekiq's data in Redis the way Ruby's
// Sidekiq::API (lib/sidekiq/api.rb) and the Web UI do: stats, queues, the
// retry / schedule / dead sets, processes and their busy jobs. Every write
// leaves Redis as Ruby Sidekiq 6.4.1 would. It is safe for concurrent use.
type API struct {
	pool     *redis.Pool
	version  Version
	clock    clock.Clock
	client   *Client
	handlers []DeathHandler
	morgue   morgueLimits
}

// NewAPI returns an API.
func NewAPI(cfg *APIConfig) (*API, error) {
	if cfg == nil {
		return nil, errors.New("sidekiq: nil APIConfig")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	v := cfg.Version
	if v.IsZero() {
		v = DefaultVersion
	}
	clk := clock.Or(cfg.Clock)
	cl := cfg.Client
	if cl == nil {
		var err error
		cl, err = NewClient(&ClientConfig{Pool: cfg.Pool, Version: v, Clock: clk})
		if err != nil {
			return nil, err
		}
	}
	return &API{
		pool:     cfg.Pool,
		version:  v,
		clock:    clk,
		client:   cl,
		handlers: append([]DeathHandler(nil), cfg.DeathHandlers...),
		morgue:   morgueLimits{maxJobs: cfg.DeadMaxJobs, timeout: cfg.DeadTimeout},
	}, nil
}

// Version returns the wire format the API writes.
func (a *API) Version() Version { return a.version }

// Client returns the client used for re-pushes.
func (a *API) Client() *Client { return a.client }

func (a *API) conn(ctx context.Context, op string) (redis.Conn, error) {
	c, err := a.pool.GetContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("sidekiq: %s: %w", op, err)
	}
	return c, nil
}

// PageParams select one page of a queue or sorted-set listing.
type PageParams struct {
	// Offset is the number of entries skipped, in listing order.
	Offset int
	// Limit is the page size. Default 25 (the Web UI's default).
	Limit int
}

func (p *PageParams) bounds() (offset, limit int, err error) {
	if p == nil {
		return 0, 25, nil
	}
	if p.Offset < 0 || p.Limit < 0 {
		return 0, 0, errors.New("sidekiq: PageParams.Offset and Limit must not be negative")
	}
	limit = p.Limit
	if limit == 0 {
		limit = 25
	}
	return p.Offset, limit, nil
}

// BulkActionResult reports a set-wide action (retry all, kill all, add
// all).
type BulkActionResult struct {
	// Moved counts the entries removed from the set and pushed or killed.
	Moved int
	// Remaining is the set's size at the end: entries that could not be
	// moved (unparsable payloads are left in place) or that arrived
	// meanwhile.
	Remaining int64
}

// sscanAll reads a whole set with SSCAN, as Ruby's sscan_each, sorted and
// without duplicates.
func sscanAll(ctx context.Context, conn redis.Conn, key string) ([]string, error) {
	first, err := redis.DoContext(conn, ctx, "SSCAN", key, "0", "COUNT", 1000)
	if err != nil {
		return nil, err
	}
	return sscanContinue(ctx, conn, key, first)
}

// rubyToI mimics Ruby's String#to_i (and nil.to_i): the leading decimal
// integer, or 0.
func rubyToI(s string) int64 {
	i := 0
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n') {
		i++
	}
	start := i
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n, _ := strconv.ParseInt(s[start:i], 10, 64)
	return n
}

// rubyToF approximates Ruby's String#to_f for the numbers Sidekiq writes.
func rubyToF(s string) float64 {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return float64(rubyToI(s))
	}
	return f
}

// formatScore writes a score as Ruby's Float#to_s (Redis reads it back as
// the same double).
func formatScore(f float64) string { return rubyjson.FormatFloat(f) }

// execMulti sends MULTI, the queued commands (already Sent by queue) and
// EXEC, and returns EXEC's replies, failing on any per-command error.
func execMulti(ctx context.Context, conn redis.Conn, queue func(conn redis.Conn)) ([]any, error) {
	if err := conn.Send("MULTI"); err != nil {
		return nil, err
	}
	queue(conn)
	replies, err := redis.Values(redis.DoContext(conn, ctx, "EXEC"))
	if err != nil {
		return nil, err
	}
	for _, r := range replies {
		if e, ok := r.(redis.Error); ok {
			return nil, e
		}
	}
	return replies, nil
}
