package sidekiq

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// PoolOptions tune NewPool.
type PoolOptions struct {
	// MaxActive limits open connections (0 = no limit).
	MaxActive int
	// MaxIdle is how many idle connections are kept (default 16).
	MaxIdle int
	// ReadTimeout bounds a reply; blocking commands pass their own timeout
	// on top of it. Default 0 (none).
	ReadTimeout time.Duration
}

// NewPool returns a redigo pool for a Redis URL: redis://[:pass@]host:port/db,
// rediss://… (TLS), or unix:///path/to/socket[?db=N]. An empty URL means
// $REDIS_URL, then redis://127.0.0.1:6379/0.
func NewPool(rawURL string, o *PoolOptions) (*redis.Pool, error) {
	if o == nil {
		o = &PoolOptions{}
	}
	if rawURL == "" {
		rawURL = "redis://127.0.0.1:6379/0"
	}
	dial, err := Dialer(rawURL, o.ReadTimeout)
	if err != nil {
		return nil, err
	}
	maxIdle := o.MaxIdle
	if maxIdle == 0 {
		maxIdle = 16
	}
	return &redis.Pool{
		MaxActive:   o.MaxActive,
		MaxIdle:     maxIdle,
		IdleTimeout: 5 * time.Minute,
		Wait:        o.MaxActive > 0,
		DialContext: dial,
		TestOnBorrow: func(c redis.Conn, t time.Time) error {
			// Cheap: the fetchers own their connections, so the pool only
			// serves heartbeats, retries and the poller.
			if time.Since(t) < time.Second {
				return nil
			}
			_, err := c.Do("PING")
			return err
		},
	}, nil
}

// Dialer returns a dial function for a Redis URL.
func Dialer(rawURL string, readTimeout time.Duration) (func(ctx context.Context) (redis.Conn, error), error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("sidekiq: redis url: %w", err)
	}
	opts := []redis.DialOption{redis.DialConnectTimeout(5 * time.Second)}
	if readTimeout > 0 {
		opts = append(opts, redis.DialReadTimeout(readTimeout))
	}
	switch u.Scheme {
	case "unix":
		path := u.Path
		if db := u.Query().Get("db"); db != "" {
			var n int
			if _, err := fmt.Sscan(db, &n); err != nil {
				return nil, fmt.Errorf("sidekiq: redis url: bad db %q", db)
			}
			opts = append(opts, redis.DialDatabase(n))
		}
		if p, ok := u.User.Password(); ok {
			opts = append(opts, redis.DialPassword(p))
		}
		return func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "unix", path, opts...)
		}, nil
	case "redis", "rediss":
		if !strings.Contains(u.Host, ":") {
			u.Host += ":6379"
		}
		s := u.String()
		return func(ctx context.Context) (redis.Conn, error) {
			return redis.DialURLContext(ctx, s, opts...)
		}, nil
	}
	return nil, fmt.Errorf("sidekiq: redis url %q: scheme must be redis, rediss or unix", rawURL)
}
