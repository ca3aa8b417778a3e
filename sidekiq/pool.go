package sidekiq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/redact"
	"github.com/gojob/gojob/sidekiq/internal/resp"
	"github.com/gojob/gojob/sidekiq/internal/sentinel"
)

// NewPool returns a redigo pool for a Redis URL: redis://[:pass@]host:port/db,
// rediss://… (TLS), unix:///path/to/socket[?db=N], or
// redis+sentinel://[user:pass@]host:port[,host:port…]/MASTER[/DB] for the
// master a Redis Sentinel deployment monitors as MASTER (followed through
// failovers: docs/sentinel.md). An empty URL means
// redis://127.0.0.1:6379/0. The pool keeps up to 16 idle connections and
// opens as many as asked (set MaxActive and Wait to bound them); its
// DialContext opens a connection of its own, outside the pool (for a
// subscription, say). Errors never show the URL's password.
func NewPool(rawURL string) (*redis.Pool, error) {
	if rawURL == "" {
		rawURL = "redis://127.0.0.1:6379/0"
	}
	dial, err := dialer(rawURL)
	if err != nil {
		return nil, err
	}
	return &redis.Pool{
		MaxIdle:     16,
		IdleTimeout: 5 * time.Minute,
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

// keepAlive makes the kernel probe an idle TCP connection to Redis after
// 10 s and give up after 3 unanswered probes 5 s apart: a vanished host
// ends a blocked read in about 25 s, while a stalled Redis (whose kernel
// still answers) keeps its connections, and the commands on them.
var keepAlive = net.KeepAliveConfig{Enable: true, Idle: 10 * time.Second, Interval: 5 * time.Second, Count: 3}

// dialer returns the dial function of a Redis URL.
func dialer(rawURL string) (func(ctx context.Context) (redis.Conn, error), error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("sidekiq: redis url: %s", redact.String(err.Error(), rawURL))
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAliveConfig: keepAlive}
	// Connections are corkable (resp.Cork): the fetch writes each round
	// of commands in one write.
	opts := []redis.DialOption{redis.DialConnectTimeout(5 * time.Second)}
	switch u.Scheme {
	case "unix":
		path := u.Path
		if db := u.Query().Get("db"); db != "" {
			var n int
			if _, err := fmt.Sscan(db, &n); err != nil {
				return nil, fmt.Errorf("sidekiq: redis url %s: bad db %q", redact.URL(rawURL), db)
			}
			opts = append(opts, redis.DialDatabase(n))
		}
		if p, ok := u.User.Password(); ok {
			opts = append(opts, redis.DialPassword(p))
		}
		return func(ctx context.Context) (redis.Conn, error) {
			return resp.DialCorkable(ctx, 0, dialer.DialContext, func(ctx context.Context, opts ...redis.DialOption) (redis.Conn, error) {
				return redis.DialContext(ctx, "unix", path, opts...)
			}, opts...)
		}, nil
	case "redis", "rediss":
		if !strings.Contains(u.Host, ":") {
			u.Host += ":6379"
		}
		s := u.String()
		return func(ctx context.Context) (redis.Conn, error) {
			c, err := resp.DialCorkable(ctx, 0, dialer.DialContext, func(ctx context.Context, opts ...redis.DialOption) (redis.Conn, error) {
				return redis.DialURLContext(ctx, s, opts...)
			}, opts...)
			if err != nil {
				return nil, redactedError{err, s}
			}
			return c, nil
		}, nil
	case "redis+sentinel":
		d, err := sentinelDialer(u, dialer, opts)
		if err != nil {
			return nil, fmt.Errorf("sidekiq: redis url %s: %w", redact.URL(rawURL), err)
		}
		return d.Dial, nil
	}
	return nil, fmt.Errorf("sidekiq: redis url %q: scheme must be redis, rediss, redis+sentinel or unix", redact.URL(rawURL))
}

// sentinelDialer reads redis+sentinel://[user:pass@]host:port[,host:port…]/MASTER[/DB]:
// the sentinels (port 26379 when none is given), the name they monitor
// the master under, the database. The credentials are the master's; a
// sentinel that asks for a password gets them too.
func sentinelDialer(u *url.URL, netDialer *net.Dialer, opts []redis.DialOption) (*sentinel.Dialer, error) {
	var addrs []string
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(h, "26379")
		}
		addrs = append(addrs, h)
	}
	if len(addrs) == 0 {
		return nil, errors.New("no sentinel address (redis+sentinel://host:port[,host:port…]/MASTER[/DB])")
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if parts[0] == "" || len(parts) > 2 {
		return nil, errors.New("the path must be /MASTER or /MASTER/DB (the name the sentinels monitor)")
	}
	db := 0
	if len(parts) == 2 {
		n, err := strconv.Atoi(parts[1])
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad db %q", parts[1])
		}
		db = n
	}
	cfg := sentinel.Config{Addrs: addrs, Master: parts[0], DB: db, Username: u.User.Username(), NetDial: netDialer.DialContext,
		Dial: func(ctx context.Context, addr string, netDial func(ctx context.Context, network, addr string) (net.Conn, error),
			o ...redis.DialOption) (redis.Conn, error) {
			return resp.DialCorkable(ctx, 0, netDial, func(ctx context.Context, o ...redis.DialOption) (redis.Conn, error) {
				return redis.DialContext(ctx, "tcp", addr, o...)
			}, append(opts[:len(opts):len(opts)], o...)...)
		}}
	cfg.Password, _ = u.User.Password()
	return sentinel.New(cfg), nil
}

// redactedError is a dial error whose text hides the URL's password; it
// unwraps to the original (a net.Error stays one).
type redactedError struct {
	err error
	url string
}

func (e redactedError) Error() string { return redact.String(e.err.Error(), e.url) }
func (e redactedError) Unwrap() error { return e.err }
