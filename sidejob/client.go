package sidejob

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/internal/monoclock"
	"github.com/gojob/gojob/internal/redisreply"
	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Gem constants (SideJob::CONFIGURATION).
const (
	// defaultLockExpiration is the TTL of the job lock taken for a run.
	defaultLockExpiration = 60 * time.Second
	// defaultMaxRunsPerMinute is the rate limit per job and calendar minute.
	defaultMaxRunsPerMinute = 600
)

// Config configures a Client.
type Config struct {
	// Pool is the Redis pool shared with Sidekiq. Required.
	Pool *redis.Pool
	// Sidekiq pushes the jobs' Sidekiq items. Default: a client on Pool
	// writing Version's format.
	Sidekiq *sidekiq.Client
	// Version is the Sidekiq wire format of pushed items when Sidekiq is nil.
	// Default wire.Version6.
	Version wire.Version
	// Clock is the time source. Default the system clock.
	Clock clock.Clock
	// LockExpiration is the job lock TTL of a run. Default 60 s.
	LockExpiration time.Duration
	// MaxRunsPerMinute is the per-job run limit; the next run terminates
	// the job. Default 600.
	MaxRunsPerMinute int
}

func (c *Config) validate() error {
	if c.Pool == nil {
		return errors.New("sidejob: Config.Pool is required")
	}
	if c.LockExpiration < 0 || c.MaxRunsPerMinute < 0 {
		return errors.New("sidejob: negative LockExpiration or MaxRunsPerMinute")
	}
	return nil
}

// Client is the Go form of the gem's SideJob module: it creates and finds
// jobs, publishes to channels and writes the log. It is safe for concurrent
// use.
type Client struct {
	pool      *redis.Pool
	sk        *sidekiq.Client
	clock     clock.Clock
	lockTTL   time.Duration
	maxPerMin int
}

// NewClient returns a client.
func NewClient(cfg *Config) (*Client, error) {
	if cfg == nil {
		return nil, errors.New("sidejob: nil Config")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Client{
		pool:      cfg.Pool,
		sk:        cfg.Sidekiq,
		clock:     monoclock.Or(cfg.Clock),
		lockTTL:   cfg.LockExpiration,
		maxPerMin: cfg.MaxRunsPerMinute,
	}
	if c.lockTTL == 0 {
		c.lockTTL = defaultLockExpiration
	}
	if c.maxPerMin == 0 {
		c.maxPerMin = defaultMaxRunsPerMinute
	}
	if c.sk == nil {
		sk, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: cfg.Pool, Version: cfg.Version, Clock: c.clock})
		if err != nil {
			return nil, err
		}
		c.sk = sk
	}
	return c, nil
}

// timestamp returns the current time as a SideJob timestamp.
func (c *Client) timestamp() string { return sidejobwire.Timestamp(c.clock.Now()) }

// jobNotFoundError is returned when a job does not exist (Ruby: "Job N does
// not exist!").
type jobNotFoundError struct {
	// ID is the job id, or 0 when Ref is an alias.
	ID int64
	// Ref is the alias or id text that was looked up, when not an id.
	Ref string
}

// Error describes the missing job.
func (e *jobNotFoundError) Error() string {
	if e.Ref != "" {
		return fmt.Sprintf("sidejob: job %s does not exist", e.Ref)
	}
	return fmt.Sprintf("sidejob: job %d does not exist", e.ID)
}

// ErrJobNotFound is matched (errors.Is) by the errors of the methods of a
// job that does not exist.
var ErrJobNotFound = errors.New("sidejob: job does not exist")

// Is makes errors.Is(err, ErrJobNotFound) true.
func (e *jobNotFoundError) Is(target error) bool { return target == ErrJobNotFound }

// rubyToI parses the leading decimal integer of s as Ruby's String#to_i
// does (leading spaces, optional sign, digits, underscores between digits).
// ok is false when no digit was found.
func rubyToI(s string) (int64, bool) {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	i := 0
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	start := i
	var digits []byte
	for i < len(s) {
		ch := s[i]
		if ch >= '0' && ch <= '9' {
			digits = append(digits, ch)
			i++
			continue
		}
		if ch == '_' && i > start && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9' {
			i++
			continue
		}
		break
	}
	if len(digits) == 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(string(digits), 10, 64)
	if err != nil {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

// conn takes a connection from the pool.
func (c *Client) conn(ctx context.Context) (redis.Conn, error) {
	conn, err := c.pool.GetContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("sidejob: redis: %w", err)
	}
	return conn, nil
}

// do runs one command.
func (c *Client) do(ctx context.Context, cmd string, args ...any) (any, error) {
	conn, err := c.conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return redis.DoContext(conn, ctx, cmd, args...)
}

// cmd is one queued command of a transaction or pipeline.
type cmd struct {
	name string
	args []any
}

func command(name string, args ...any) cmd { return cmd{name, args} }

// onConn runs send with a connection for cmds; nothing when there are
// none.
func (c *Client) onConn(ctx context.Context, cmds []cmd, send func(redis.Conn) ([]any, error)) ([]any, error) {
	if len(cmds) == 0 {
		return nil, nil
	}
	conn, err := c.conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return send(conn)
}

// multi runs cmds in one MULTI/EXEC and returns their replies.
func (c *Client) multi(ctx context.Context, cmds ...cmd) ([]any, error) {
	return c.onConn(ctx, cmds, func(conn redis.Conn) ([]any, error) {
		conn.Send("MULTI")
		for _, cm := range cmds {
			conn.Send(cm.name, cm.args...)
		}
		return redisreply.Check(redis.Values(redis.DoContext(conn, ctx, "EXEC")))
	})
}

// pipeline sends cmds in one round trip (no transaction) and returns their
// replies; the first error reply is returned as the error.
func (c *Client) pipeline(ctx context.Context, cmds ...cmd) ([]any, error) {
	return c.onConn(ctx, cmds, func(conn redis.Conn) ([]any, error) {
		return pipelined(ctx, conn, cmds)
	})
}

// pipelined sends cmds on conn, then reads their replies.
func pipelined(ctx context.Context, conn redis.Conn, cmds []cmd) ([]any, error) {
	for _, cm := range cmds {
		if err := conn.Send(cm.name, cm.args...); err != nil {
			return nil, err
		}
	}
	if err := conn.Flush(); err != nil {
		return nil, err
	}
	out := make([]any, len(cmds))
	var first error
	for i := range cmds {
		r, err := redis.ReceiveContext(conn, ctx)
		if err != nil && first == nil {
			first = err
		}
		out[i] = r
	}
	return out, first
}
