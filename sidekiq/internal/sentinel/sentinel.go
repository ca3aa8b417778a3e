// Package sentinel dials the master of a Redis Sentinel deployment, as the
// Sentinel client guidelines describe (https://redis.io/docs/latest/develop/reference/sentinel-clients/):
// ask the sentinels in turn for the master's address, connect, and check
// with ROLE that it is a master; connect again (asking again) after any
// failure. A watcher follows the sentinels' +switch-master events, and
// asks them every pollEvery in case an event was missed, and closes every
// connection to a master that is no longer one: what was blocked on it
// fails at once, and the caller's next dial reaches the new master.
//
// The watcher runs while at least one connection of the Dialer is open.
package sentinel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Config describes a Sentinel deployment.
type Config struct {
	// Addrs are the sentinels, host:port.
	Addrs []string
	// Master is the name the sentinels monitor the master under.
	Master string
	// Username and Password authenticate to the master and its replicas,
	// and to a sentinel that asks for them (NOAUTH).
	Username, Password string
	// DB is the database selected on the master.
	DB int
	// NetDial dials a TCP connection (keepalive settings and the like).
	NetDial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Dial makes a redigo connection to addr over netDial's network
	// connections, with opts (the database and the credentials) and any
	// of its own (a read timeout, corking).
	Dial func(ctx context.Context, addr string, netDial func(ctx context.Context, network, addr string) (net.Conn, error),
		opts ...redis.DialOption) (redis.Conn, error)
}

// Error is a failure to find the master: no sentinel answered, or those
// that answered do not know the name.
type Error struct {
	Master string
	Addrs  []string
	// Unknown: every sentinel that answered said it monitors no master of
	// that name.
	Unknown bool
	// Last is the last error of a sentinel that did not answer.
	Last error
}

func (e *Error) Error() string {
	if e.Unknown {
		return fmt.Sprintf("redis sentinel: the sentinels at %s monitor no master named %q", strings.Join(e.Addrs, ","), e.Master)
	}
	return fmt.Sprintf("redis sentinel: no sentinel at %s answered: %v", strings.Join(e.Addrs, ","), e.Last)
}

// Unwrap returns the last sentinel's error (a net.Error stays one, so that
// a caller that backs off on connection errors does here too).
func (e *Error) Unwrap() error { return e.Last }

// ReplicaError is a dial that reached a server that is not the master
// (the sentinels have not switched yet, or a failover is under way).
type ReplicaError struct {
	Addr, Role string
}

func (e *ReplicaError) Error() string {
	return fmt.Sprintf("redis sentinel: %s is a %s, not the master (a failover is under way)", e.Addr, e.Role)
}

// Timeout implements net.Error: the caller retries as it does a refused
// connection.
func (e *ReplicaError) Timeout() bool { return false }

// Temporary implements net.Error.
func (e *ReplicaError) Temporary() bool { return true }

// sentinelTimeout bounds one sentinel's answer.
const sentinelTimeout = time.Second

// pollEvery is how often the watcher asks for the master's address beside
// the events (an event is lost while no sentinel connection is up).
const pollEvery = 5 * time.Second

// Dialer dials the current master of a Sentinel deployment.
type Dialer struct {
	cfg Config

	mu sync.Mutex
	// addrs are the sentinels, the last one that answered first.
	addrs []string
	// master is the master's address as last learnt.
	master string
	// live are the open connections by the address they reach.
	live     map[*tracked]struct{}
	watching bool
	stop     chan struct{}
	watched  sync.WaitGroup
}

// New returns a Dialer for cfg.
func New(cfg Config) *Dialer {
	return &Dialer{cfg: cfg, addrs: append([]string(nil), cfg.Addrs...), live: map[*tracked]struct{}{}}
}

// Dial connects to the master.
func (d *Dialer) Dial(ctx context.Context) (redis.Conn, error) {
	addr, err := d.Master(ctx)
	if err != nil {
		return nil, err
	}
	netDial := func(ctx context.Context, network, a string) (net.Conn, error) {
		nc, err := d.cfg.NetDial(ctx, network, a)
		if err != nil {
			return nil, err
		}
		return d.track(nc, addr), nil
	}
	opts := []redis.DialOption{redis.DialDatabase(d.cfg.DB)}
	if d.cfg.Password != "" {
		opts = append(opts, redis.DialPassword(d.cfg.Password))
	}
	if d.cfg.Username != "" {
		opts = append(opts, redis.DialUsername(d.cfg.Username))
	}
	c, err := d.cfg.Dial(ctx, addr, netDial, opts...)
	if err != nil {
		return nil, err
	}
	if role, err := roleOf(ctx, c); err != nil {
		c.Close()
		return nil, err
	} else if role != "" && role != "master" {
		c.Close()
		d.forget(addr)
		return nil, &ReplicaError{Addr: addr, Role: role}
	}
	return c, nil
}

// roleOf returns the first element of ROLE ("master", "slave"), or ""
// where ROLE is refused (renamed away, ACL).
func roleOf(ctx context.Context, c redis.Conn) (string, error) {
	v, err := redis.Values(redis.DoContext(c, ctx, "ROLE"))
	var re redis.Error
	if errors.As(err, &re) && !strings.HasPrefix(string(re), "LOADING") && !strings.HasPrefix(string(re), "NOAUTH") {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if len(v) == 0 {
		return "", nil
	}
	role, _ := redis.String(v[0], nil)
	return role, nil
}

// Master asks the sentinels, in turn, for the master's address.
func (d *Dialer) Master(ctx context.Context) (string, error) {
	d.mu.Lock()
	addrs := append([]string(nil), d.addrs...)
	d.mu.Unlock()
	e := &Error{Master: d.cfg.Master, Addrs: d.cfg.Addrs, Unknown: true}
	answered := false
	for _, s := range addrs {
		addr, err := d.ask(ctx, s)
		if err == nil {
			d.mu.Lock()
			d.promote(s)
			d.master = addr
			d.mu.Unlock()
			return addr, nil
		}
		if errors.Is(err, errUnknownMaster) {
			answered = true
			continue
		}
		e.Last = err
		if ctx.Err() != nil {
			break
		}
	}
	if !answered {
		e.Unknown = false
	}
	return "", e
}

var errUnknownMaster = errors.New("unknown master")

// ask asks one sentinel for the master's address.
func (d *Dialer) ask(ctx context.Context, sentinel string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, sentinelTimeout)
	defer cancel()
	c, err := d.dialSentinel(ctx, sentinel)
	if err != nil {
		return "", err
	}
	defer c.Close()
	v, err := redis.Strings(redis.DoContext(c, ctx, "SENTINEL", "get-master-addr-by-name", d.cfg.Master))
	if errors.Is(err, redis.ErrNil) || (err == nil && len(v) != 2) {
		return "", errUnknownMaster
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", sentinel, err)
	}
	return net.JoinHostPort(v[0], v[1]), nil
}

// dialSentinel connects to a sentinel, authenticating with the
// configured credentials only when it asks for them.
func (d *Dialer) dialSentinel(ctx context.Context, sentinel string) (redis.Conn, error) {
	c, err := redis.DialContext(ctx, "tcp", sentinel, redis.DialContextFunc(d.cfg.NetDial),
		redis.DialReadTimeout(sentinelTimeout), redis.DialWriteTimeout(sentinelTimeout))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sentinel, err)
	}
	if d.cfg.Password == "" {
		return c, nil
	}
	if _, err := redis.DoContext(c, ctx, "PING"); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		return c, nil
	}
	args := []any{d.cfg.Password}
	if d.cfg.Username != "" {
		args = []any{d.cfg.Username, d.cfg.Password}
	}
	if _, err := redis.DoContext(c, ctx, "AUTH", args...); err != nil {
		c.Close()
		return nil, fmt.Errorf("%s: %w", sentinel, err)
	}
	return c, nil
}

// promote moves the sentinel that answered to the front (d.mu held).
func (d *Dialer) promote(s string) {
	for i, a := range d.addrs {
		if a == s {
			copy(d.addrs[1:i+1], d.addrs[:i])
			d.addrs[0] = s
			return
		}
	}
}

// forget closes the connections to addr, which turned out not to be the
// master.
func (d *Dialer) forget(addr string) {
	d.closeWhere(func(t *tracked) bool { return t.addr == addr })
}

// switched records the master's new address and closes every connection
// to another one.
func (d *Dialer) switched(addr string) {
	d.mu.Lock()
	d.master = addr
	d.mu.Unlock()
	d.closeWhere(func(t *tracked) bool { return t.addr != addr })
}

// closeWhere closes the open connections stale reports: the redigo
// connection on each fails on its next read or write, a blocked read
// included.
func (d *Dialer) closeWhere(stale func(*tracked) bool) {
	d.mu.Lock()
	var close []*tracked
	for t := range d.live {
		if stale(t) {
			close = append(close, t)
		}
	}
	d.mu.Unlock()
	for _, t := range close {
		t.Conn.Close()
	}
}

// tracked is a network connection to a master, known to the Dialer until
// it is closed.
type tracked struct {
	net.Conn
	d    *Dialer
	addr string
	once sync.Once
}

func (d *Dialer) track(nc net.Conn, addr string) net.Conn {
	t := &tracked{Conn: nc, d: d, addr: addr}
	d.mu.Lock()
	d.live[t] = struct{}{}
	if !d.watching {
		d.watching = true
		d.stop = make(chan struct{})
		d.watched.Add(1)
		go d.watch(d.stop)
	}
	d.mu.Unlock()
	return t
}

func (t *tracked) Close() error {
	t.once.Do(func() {
		d := t.d
		d.mu.Lock()
		delete(d.live, t)
		if len(d.live) == 0 && d.watching {
			d.watching = false
			close(d.stop)
		}
		d.mu.Unlock()
	})
	return t.Conn.Close()
}

// Close waits for the watcher to end once every connection is closed.
func (d *Dialer) Close() { d.watched.Wait() }

// watch follows the master while connections are open: +switch-master
// events from a sentinel, and the master's address every pollEvery.
func (d *Dialer) watch(stop chan struct{}) {
	defer d.watched.Done()
	events := make(chan string, 1)
	var sub sync.WaitGroup
	sub.Add(1)
	subStop := make(chan struct{})
	go func() {
		defer sub.Done()
		d.subscribe(subStop, events)
	}()
	defer func() {
		close(subStop)
		sub.Wait()
	}()
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case addr := <-events:
			d.switched(addr)
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 2*sentinelTimeout)
			addr, err := d.Master(ctx)
			cancel()
			if err == nil {
				d.switched(addr)
			}
		}
	}
}

// subscribe listens to +switch-master on one sentinel after another until
// stop, sending the new address of this master to events.
func (d *Dialer) subscribe(stop chan struct{}, events chan<- string) {
	backoff := 100 * time.Millisecond
	for i := 0; ; i++ {
		d.mu.Lock()
		s := d.addrs[i%len(d.addrs)]
		d.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
		c, err := d.dialSentinel(ctx, s)
		cancel()
		if err == nil {
			backoff = 100 * time.Millisecond
			d.listen(stop, c, events)
		}
		select {
		case <-stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// listen reads +switch-master events on c until it fails or stop.
func (d *Dialer) listen(stop chan struct{}, c redis.Conn, events chan<- string) {
	psc := redis.PubSubConn{Conn: c}
	defer psc.Close()
	if err := psc.Subscribe("+switch-master"); err != nil {
		return
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-stop:
			psc.Close() // ends the blocked receive
		case <-done:
		}
	}()
	for {
		// A long read: the sentinel sends nothing until an event.
		switch m := psc.ReceiveWithTimeout(0).(type) {
		case error:
			return
		case redis.Message:
			// "<master name> <old ip> <old port> <new ip> <new port>"
			f := strings.Fields(string(m.Data))
			if len(f) == 5 && f[0] == d.cfg.Master {
				if _, err := strconv.Atoi(f[4]); err == nil {
					select {
					case events <- net.JoinHostPort(f[3], f[4]):
					case <-stop:
						return
					}
				}
			}
		}
	}
}
