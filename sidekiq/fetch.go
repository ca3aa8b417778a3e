package sidekiq

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
)

// fetchTimeout is BasicFetch's BRPOP timeout in seconds.
const fetchTimeout = 2

// fetchOrder builds the BRPOP key list as Sidekiq's BasicFetch does (§4):
// strict (config order) when no queue has a weight (7.0.0-7.0.2: when the
// weighted list has no duplicates), otherwise a fresh weighted shuffle with
// duplicates removed on every fetch.
type fetchOrder struct {
	strict   bool
	unique   []string // queue names in config order, unique
	weighted []string // "queue:<name>" repeated max(weight,1) times
	fixed    []any    // BRPOP args for strict mode, timeout included
}

func newFetchOrder(qs []QueueWeight, v Version) fetchOrder {
	f := fetchOrder{strict: true}
	// 7.0.0-7.0.2 (fetch.rb): strict when the weighted list has no
	// duplicates; 6.4 (cli.rb#parse_queue) and 7.0.3+ (capsule mode
	// :strict): when every weight is 0.
	dupStrict := v.AtLeast(7, 0, 0) && !v.AtLeast(7, 0, 3)
	seen := map[string]bool{}
	for _, q := range qs {
		if q.Weight > 0 {
			f.strict = false
		}
		n := max(q.Weight, 1)
		for i := 0; i < n; i++ {
			f.weighted = append(f.weighted, QueueKey(q.Name))
		}
		if !seen[q.Name] {
			seen[q.Name] = true
			f.unique = append(f.unique, q.Name)
		}
	}
	if dupStrict {
		f.strict = len(f.weighted) == len(f.unique)
	}
	for _, q := range f.unique {
		f.fixed = append(f.fixed, QueueKey(q))
	}
	f.fixed = append(f.fixed, fetchTimeout)
	return f
}

// args returns the BRPOP arguments for one fetch.
func (f *fetchOrder) args(r *rand.Rand) []any {
	if f.strict {
		return f.fixed
	}
	keys := make([]string, len(f.weighted))
	copy(keys, f.weighted)
	r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	out := make([]any, 0, len(f.unique)+1)
	seen := make(map[string]bool, len(f.unique))
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return append(out, fetchTimeout)
}

func (f *fetchOrder) String() string {
	if f.strict {
		return strings.Join(f.unique, ",") + " (strict)"
	}
	return strings.Join(f.unique, ",") + " (weighted)"
}

// fetchConn is a fetch connection and its reconnect policy.
type fetchConn struct {
	s     *Server
	conn  redis.Conn
	fresh bool // dialled for the coming command
	b     backoff
}

// ready makes sure there is a connection, dialling with backoff through an
// outage; it reports false when the server went quiet meanwhile.
func (f *fetchConn) ready() bool {
	if f.conn != nil {
		f.fresh = false
		return true
	}
	for {
		c, err := f.s.dialFetch()
		if err == nil {
			f.conn, f.fresh = c, true
			return true
		}
		f.s.outage.failed(err)
		if !f.s.sleepOrQuiet(f.b.next()) {
			return false
		}
	}
}

// failed drops the connection after an error. A connection error on a
// connection that had been idle (Redis restarted while we ran a job) is
// retried at once; anything else is an outage, with backoff. It reports
// false when the server went quiet meanwhile.
func (f *fetchConn) failed(err error) bool {
	f.close()
	if !f.fresh && isConnError(err) {
		return true
	}
	f.s.outage.failed(err)
	return f.s.sleepOrQuiet(f.b.next())
}

// ok records a successful command.
func (f *fetchConn) ok() {
	f.s.outage.ok()
	f.b.reset()
}

func (f *fetchConn) close() {
	if f.conn != nil {
		f.conn.Close()
		f.conn = nil
	}
}

func (s *Server) dialFetch() (redis.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.cfg.Dial(ctx)
}

// requeue pushes jobs back to the pop end of their queue in one RPUSH (the
// last one given is popped first), retrying through an outage until Stop
// gives up.
func (s *Server) requeue(queue string, raws ...[]byte) {
	args := make([]any, 0, len(raws)+1)
	args = append(args, QueueKey(queue))
	for _, r := range raws {
		args = append(args, r)
	}
	err := s.withRetry(func(conn redis.Conn) error {
		_, err := conn.Do("RPUSH", args...)
		return err
	})
	if err != nil {
		for _, raw := range raws {
			s.log.Error().Err(err).Str("queue", queue).Bytes("payload", raw).Msg("could not requeue job")
		}
	}
}

// reversed returns a reversed copy of b.
func reversed(b [][]byte) [][]byte {
	out := make([][]byte, len(b))
	for i, x := range b {
		out[len(b)-1-i] = x
	}
	return out
}

// sleepOrQuiet sleeps d and reports false when the server went quiet.
func (s *Server) sleepOrQuiet(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.quietCh:
		return false
	}
}

// withRetry runs f on a pooled connection, retrying with backoff through a
// Redis outage until it succeeds or Stop gives up (writeCtx). It is used for
// writes that must not be lost (retry and dead entries, requeues), which
// may happen after the hard shutdown has cancelled the jobs.
func (s *Server) withRetry(f func(redis.Conn) error) error {
	return s.retryOutage(func() error {
		conn, err := s.cfg.Pool.GetContext(s.writeCtx)
		if err != nil {
			return err
		}
		defer conn.Close()
		return f(conn)
	})
}

// retryOutage runs f until it succeeds, fails with a Redis error reply, or
// writeCtx ends, backing off while Redis is unreachable.
func (s *Server) retryOutage(f func() error) error {
	b := newBackoff()
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil {
			s.outage.ok()
			return nil
		}
		if !isConnError(err) || s.writeCtx.Err() != nil {
			return err
		}
		if attempt <= staleRetries {
			continue // a stale pooled connection; the pool drops it
		}
		s.outage.failed(err)
		t := time.NewTimer(b.next())
		select {
		case <-t.C:
		case <-s.writeCtx.Done():
			t.Stop()
			return err
		}
	}
}

// staleRetries is how many connection errors are retried at once before an
// outage is declared: after a Redis restart the pool still holds dead
// connections, which fail once each.
const staleRetries = 3

// isConnError reports whether err is a network/connection failure (worth
// retrying) rather than a Redis error reply.
func isConnError(err error) bool {
	var re redis.Error
	return !errors.As(err, &re)
}

// backoff is an exponential backoff from 100 ms to 5 s with jitter.
type backoff struct{ d time.Duration }

func newBackoff() *backoff { return &backoff{} }

func (b *backoff) next() time.Duration {
	if b.d == 0 {
		b.d = 100 * time.Millisecond
	} else {
		b.d = min(b.d*2, 5*time.Second)
	}
	return b.d/2 + rand.N(b.d/2+1)
}

func (b *backoff) reset() { b.d = 0 }

// outageLog logs a Redis outage once when it starts and once when it ends,
// however many goroutines see it.
type outageLog struct {
	mu    sync.Mutex
	down  bool
	since time.Time
	log   *zerolog.Logger
}

func (o *outageLog) failed(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.down {
		return
	}
	o.down = true
	o.since = time.Now()
	o.log.Error().Err(err).Str("component", "redis").Msg("redis unavailable; retrying with backoff")
}

func (o *outageLog) ok() {
	o.mu.Lock()
	if !o.down {
		o.mu.Unlock()
		return
	}
	o.down = false
	d := time.Since(o.since)
	o.mu.Unlock()
	o.log.Info().Dur("outage", d).Str("component", "redis").Msg("redis is back")
}

// tidFor returns a short base-36 thread id for a slot, like Ruby's
// (Thread#object_id ^ pid).to_s(36).
func tidFor(slot int) string {
	n := uint64(slot+1)*2654435761 ^ uint64(os.Getpid())
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	var b [13]byte
	i := len(b)
	for {
		i--
		b[i] = digits[n%36]
		n /= 36
		if n == 0 {
			break
		}
	}
	return string(b[i:])
}

func newRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), seed))
}
