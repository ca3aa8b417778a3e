package sidekiq

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/internal/fetch"
	"github.com/gojob/gojob/sidekiq/internal/maintenance"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
)

// errClosed is returned by Start on a server that has already run (a
// Server runs once).
var errClosed = errors.New("sidekiq: server closed")

// Server is a Sidekiq processing node: it fetches jobs from its queues,
// runs their handlers, retries and buries failures, polls the retry and
// schedule sets, and keeps a heartbeat so the Web UI shows it like a Ruby
// process. A Server runs once: Start, then Stop (or Run).
type Server struct {
	cfg      *ServerConfig
	log      zerolog.Logger
	client   *Client
	identity string
	// format is what the server writes; with FollowVersion the follower
	// changes it before a heartbeat.
	format *contract.LiveFormat
	// proc runs the fetched jobs (processor.go).
	proc  *processor
	fetch fetchState
	maint maintenanceState
	redis redisState
	life  lifecycle
	// services run beside the jobs (service.go).
	services []Service
}

// fetchState is the server's fetch and what Ready reads of it.
type fetchState struct {
	order   *fetch.Order
	fetcher fetch.Fetcher
	// depth is the BRPOP pipeline depth in use, once started.
	depth atomic.Int32
	stats fetch.Stats
	// health is what the fetch's round trips say of Redis.
	health   fetch.Health
	progress progressWatch
	// running: Start has started the fetch (Ready says "starting" until
	// then: the fetch's setup may wait out an outage).
	running atomic.Bool
}

// progressWatch tells, from the count of jobs started, how long none has
// started: Ready asks it each time it is called (no clock is read per job).
type progressWatch struct {
	mu    sync.Mutex
	count int64
	seen  time.Time // when count last changed, or Ready first asked
}

func (p *progressWatch) idle(started int64) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if p.seen.IsZero() || started != p.count {
		p.count, p.seen = started, now
	}
	return now.Sub(p.seen)
}

// maintenanceState is the process's background work beside the jobs.
type maintenanceState struct {
	heartbeat *maintenance.Heartbeat
	follower  *maintenance.VersionFollower
	poller    *maintenance.Poller // nil when disabled
	// checkedAtStart spares the first beat the follower's check that Start
	// has just made.
	checkedAtStart atomic.Bool
	info           *maintenance.ProcessInfo
	// The paused-queues watcher (pause.go).
	pauseCancel context.CancelFunc
	pauseDone   chan struct{}
}

// redisState carries the writes that must not be lost (retry and dead
// entries, requeues, the poller's pushes) through an outage. The writes'
// context outlives the hard shutdown and ends when Stop finishes or gives
// up.
type redisState struct {
	writes    *redisx.Retrier
	writeStop context.CancelFunc
	outage    redisx.OutageLog
}

// lifecycle is the server's run state: quiet, stop requested, hard
// shutdown, stopped.
type lifecycle struct {
	quietCh  chan struct{} // closed when quiet (fetching stops)
	quietOne sync.Once
	stopCh   chan struct{} // closed when a stop is requested
	stopOne  sync.Once
	hardCtx  context.Context // cancelled at hard shutdown
	hardStop context.CancelFunc
	state    atomic.Int32
	done     chan struct{} // closed when fully stopped
	stopErr  error
}

const (
	stateNew int32 = iota
	stateRunning
	stateStopped
)

// NewServer returns a server.
func NewServer(cfg *ServerConfig) (*Server, error) {
	if cfg == nil {
		return nil, errors.New("sidekiq: nil ServerConfig")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	format := contract.FixedFormat(c.Version)
	if c.FollowVersion {
		// Until Start decides: the format every reader shows.
		format = contract.NewLiveFormat(contract.FormatForAll)
	}
	client := c.Client
	if client == nil {
		var err error
		client, err = newClient(&ClientConfig{Pool: c.Pool, Clock: c.Clock, Extensions: c.Extensions}, format)
		if err != nil {
			return nil, err
		}
	} else {
		client.Extend(c.Extensions...)
	}
	hard, cancel := context.WithCancel(context.Background())
	writes, stopWrites := context.WithCancel(context.Background())
	s := &Server{
		cfg:      c,
		log:      c.Logger,
		client:   client,
		identity: fmt.Sprintf("%s:%d:%s", strings.ReplaceAll(c.Hostname, ":", "-"), os.Getpid(), contract.NewJID()[:12]),
		format:   format,
	}
	s.fetch.order = fetch.NewOrder(c.Queues, format.Version())
	s.life.quietCh = make(chan struct{})
	s.life.stopCh = make(chan struct{})
	s.life.hardCtx, s.life.hardStop = hard, cancel
	s.life.done = make(chan struct{})
	s.redis.writeStop = stopWrites
	s.redis.writes = &redisx.Retrier{Pool: c.Pool, Ctx: writes, Outage: &s.redis.outage}
	s.proc = &processor{
		cfg:      c,
		log:      &s.log,
		identity: s.identity,
		format:   format,
		order:    s.fetch.order,
		writes:   s.redis.writes,
		hardCtx:  hard,
		jobBase:  context.WithoutCancel(hard),
		handlers: map[string]*registration{},
		quiet:    s.life.quietCh,
		slots:    make([]slotCell, c.Concurrency),
		counters: maintenance.NewCounters(c.Concurrency),
		metrics:  maintenance.NewJobMetrics(c.Concurrency),
		caps:     newQueueCaps(c.QueueConcurrency, s.fetch.order),
	}
	s.proc.extend(c.Extensions...)
	s.redis.outage.Log = &s.log
	s.redis.outage.Probe = s.probeRedis
	s.fetch.health.Log = &s.log
	s.maint.info = &maintenance.ProcessInfo{
		Identity:    s.identity,
		Hostname:    c.Hostname,
		Tag:         c.Tag,
		Labels:      c.Labels,
		Concurrency: c.Concurrency,
		Queues:      c.Queues,
		DirTag:      dirTag(),
	}
	var err error
	s.maint.follower, err = maintenance.NewVersionFollower(&maintenance.VersionFollowerConfig{
		Pool:     c.Pool,
		Identity: s.identity,
		Format:   format,
		Follow:   c.FollowVersion,
		Clock:    c.Clock,
		Logger:   c.Logger,
	})
	if err != nil {
		return nil, err
	}
	s.maint.heartbeat, err = maintenance.NewHeartbeat(&maintenance.HeartbeatConfig{
		Pool:     c.Pool,
		Format:   format,
		Clock:    c.Clock,
		Logger:   c.Logger,
		Outage:   &s.redis.outage,
		Interval: c.HeartbeatInterval,
		Info:     s.maint.info,
		Counters: s.proc.counters,
		Metrics:  s.proc.metrics,
		Work:     s.proc.runningWork,
		Quiet:    s.isQuiet,
		OnSignal: s.Signal,
		BeforeBeat: func(ctx context.Context) {
			if s.maint.checkedAtStart.Swap(false) {
				return // Start checked just before its first beat
			}
			s.maint.follower.Check(ctx) // logs what it finds; an outage fails the beat
		},
	})
	if err != nil {
		return nil, err
	}
	if !c.DisablePoller {
		s.maint.poller, err = maintenance.NewPoller(&maintenance.PollerConfig{
			Pool:            c.Pool,
			Format:          format,
			Clock:           c.Clock,
			Logger:          c.Logger,
			Outage:          &s.redis.outage,
			Prepare:         s.client.PushPayload,
			AverageInterval: c.PollIntervalAverage,
			Quiet:           s.life.quietCh,
		})
		if err != nil {
			return nil, err
		}
	}
	return s, nil
}

// probeRedis tells whether Redis answers, on a fresh connection (those of
// the pool may be dead after a restart): the outage log tries it during an
// outage, and its success wakes the connections waiting out their backoff.
func (s *Server) probeRedis() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var conn redis.Conn
	var err error
	if s.cfg.Dial != nil {
		conn, err = s.cfg.Dial(ctx)
	} else {
		conn, err = s.cfg.Pool.GetContext(ctx)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	// A replica answers PING but refuses writes (READONLY): Redis is back
	// when it takes writes. ROLE's first element says which (Redis 2.8.12+;
	// where ROLE is refused, PING answers alone).
	role, err := redis.Values(redis.DoContext(conn, ctx, "ROLE"))
	var re redis.Error
	switch {
	case errors.As(err, &re) && !redisx.IsTransient(re):
		_, err = redis.DoContext(conn, ctx, "PING")
		return err
	case err != nil:
		return err
	}
	if len(role) > 0 {
		if r, _ := redis.String(role[0], nil); r != "master" {
			return fmt.Errorf("redis is a %s: it refuses writes", r)
		}
	}
	return nil
}

// Handle registers h for jobs whose class (or, for ActiveJob payloads, whose
// wrapped job class) is class, with opts (nil for none). Call it before
// Start. A function is a Handler through HandlerFunc:
//
//	srv.Handle("HardJob", sidekiq.HandlerFunc(perform), nil)
func (s *Server) Handle(class string, h Handler, opts *HandlerOptions) {
	r := &registration{h: h}
	if opts != nil {
		r.opts = *opts
	}
	s.proc.handlers[class] = r
}

// Use appends server middleware (Middleware). Call it before Start.
func (s *Server) Use(mw ...Middleware) { s.proc.mw = append(s.proc.mw, mw...) }

// Extend appends extensions (Extension), after those of
// ServerConfig.Extensions; the server's client gets them too. Call it
// before Start. It panics on a value that implements no hook: a
// programming error, as registering a nil handler is.
func (s *Server) Extend(ext ...Extension) {
	for _, e := range ext {
		if !hasHook(e) {
			panic(errNoHook(e))
		}
	}
	s.proc.extend(ext...)
	s.client.Extend(ext...)
}

// Serve adds services (Service); call it before Start.
func (s *Server) Serve(svc ...Service) { s.services = append(s.services, svc...) }

// startServices starts the services in order; when one fails, those
// started are stopped again.
func (s *Server) startServices(ctx context.Context) error {
	for i, svc := range s.services {
		if err := svc.Start(ctx); err != nil {
			s.stopServices(context.WithoutCancel(ctx), s.services[:i])
			return fmt.Errorf("sidekiq: start service %T: %w", svc, err)
		}
	}
	return nil
}

// stopServices stops services in reverse order.
func (s *Server) stopServices(ctx context.Context, services []Service) error {
	var errs []error
	for i := len(services) - 1; i >= 0; i-- {
		if err := services[i].Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("sidekiq: stop service %T: %w", services[i], err))
		}
	}
	return errors.Join(errs...)
}

// Identity returns the process identity ("host:pid:nonce").
func (s *Server) Identity() string { return s.identity }

// dirTag is the tag Sidekiq 8.0+ gives a process without one: its working
// directory's base name.
func dirTag() string {
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	return filepath.Base(wd)
}

// Client returns the client the server re-pushes with. Unless
// ServerConfig.Client was given, it writes the server's format, which
// follows the cluster's version with FollowVersion.
func (s *Server) Client() *Client { return s.client }

// quiet stops fetching new jobs and polling (TSTP). Running jobs finish;
// the heartbeat goes on and reports quiet.
func (s *Server) quiet() {
	s.life.quietOne.Do(func() {
		s.log.Info().Str("identity", s.identity).Msg("quiet: no new jobs will be fetched")
		close(s.life.quietCh)
	})
}

// isQuiet reports whether the server is quiet.
func (s *Server) isQuiet() bool {
	select {
	case <-s.life.quietCh:
		return true
	default:
		return false
	}
}

func (s *Server) requestStop() {
	s.life.stopOne.Do(func() { close(s.life.stopCh) })
}

// Signal acts on a Sidekiq signal name, as the signals the Web UI sends
// through Redis are acted on: TSTP quiets the server (it fetches no new
// jobs and stops polling; running jobs finish, and the heartbeat goes on
// and reports quiet), TERM and INT stop it gracefully (Run returns), TTIN
// logs every goroutine's stack.
func (s *Server) Signal(sig string) {
	s.log.Info().Str("signal", sig).Msg("got signal")
	switch sig {
	case "TSTP":
		s.quiet()
	case "TERM", "INT":
		s.quiet()
		s.requestStop()
	case "TTIN", "INFO":
		var buf bytes.Buffer
		pprof.Lookup("goroutine").WriteTo(&buf, 2)
		s.log.Warn().Str("component", "signals").Msg("goroutine dump follows")
		sc := bufio.NewScanner(&buf)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			s.log.Warn().Str("component", "signals").Msg(sc.Text())
		}
	default:
		s.log.Warn().Str("signal", sig).Msg("ignoring unknown signal")
	}
	if s.cfg.OnSignal != nil {
		s.cfg.OnSignal(sig)
	}
}
