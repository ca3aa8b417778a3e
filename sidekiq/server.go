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
	"github.com/gojob/gojob/sidekiq/wire"
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
		identity: fmt.Sprintf("%s:%d:%s", strings.ReplaceAll(c.Hostname, ":", "-"), os.Getpid(), wire.NewJID()[:12]),
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
		work:     make([]atomic.Pointer[workItem], c.Concurrency),
		metrics:  maintenance.NewJobMetrics(),
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
		Counters: &s.proc.counters,
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
// wrapped job class) is class. Call it before Start.
func (s *Server) Handle(class string, h Handler, opts *HandlerOptions) {
	r := &registration{h: h}
	if opts != nil {
		r.opts = *opts
	}
	s.proc.handlers[class] = r
}

// HandleFunc registers a function.
func (s *Server) HandleFunc(class string, f func(ctx context.Context, job *wire.Job) error) {
	s.Handle(class, HandlerFunc(f), nil)
}

// Use appends server middleware. Call it before Start.
func (s *Server) Use(mw ...ServerMiddleware) { s.proc.mw = append(s.proc.mw, mw...) }

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

// Done is closed when the server has stopped.
func (s *Server) Done() <-chan struct{} { return s.life.done }

// FetchPipeline returns how many BRPOPs each fetch connection carries at
// most, once started: ServerConfig.FetchPipeline capped by the concurrency,
// 1 where Redis refuses CLIENT UNBLOCK, 0 with FetchBatch.
func (s *Server) FetchPipeline() int { return int(s.fetch.depth.Load()) }

// Start starts fetching, the heartbeat and the poller, and returns.
func (s *Server) Start(ctx context.Context) error {
	if !s.life.state.CompareAndSwap(stateNew, stateRunning) {
		return errClosed
	}
	s.maint.info.StartedAt = s.cfg.Clock.Now()
	_, err := s.maint.follower.Check(ctx)
	s.maint.checkedAtStart.Store(err == nil || errors.Is(err, maintenance.ErrVersionUnreadable))
	if errors.Is(err, maintenance.ErrVersionUnreadable) {
		if !s.cfg.ForceVersion {
			s.life.state.Store(stateNew)
			return fmt.Errorf("sidekiq: %w; ServerConfig.ForceVersion (--force-version) writes it anyway", err)
		}
		s.log.Error().Str("component", "version").Msg(err.Error() + "; writing it anyway (ForceVersion)")
	}
	if err := s.maint.heartbeat.Beat(ctx); err != nil {
		s.log.Warn().Err(err).Str("component", "heartbeat").Msg("first heartbeat failed; retrying in the background")
	}
	s.checkPauses(ctx) // no fetch from a queue paused before the start
	if err := s.startServices(ctx); err != nil {
		s.life.state.Store(stateNew)
		return err
	}
	fetcher, err := s.newFetcher(ctx)
	if err != nil {
		s.stopServices(context.WithoutCancel(ctx), s.services)
		s.life.state.Store(stateNew)
		return err
	}
	s.fetch.fetcher = fetcher
	s.proc.fetcher = fetcher
	s.fetch.depth.Store(int32(s.fetch.fetcher.Depth()))
	s.fetch.fetcher.Start()
	s.fetch.running.Store(true)
	pauseCtx, pauseCancel := context.WithCancel(context.Background())
	s.maint.pauseCancel, s.maint.pauseDone = pauseCancel, make(chan struct{})
	go func() {
		defer close(s.maint.pauseDone)
		s.watchPauses(pauseCtx)
	}()
	s.maint.heartbeat.Start(s.life.hardCtx)
	if s.maint.poller != nil {
		s.maint.poller.Start(s.life.hardCtx)
	}
	s.log.Info().Str("identity", s.identity).Int("concurrency", s.cfg.Concurrency).Str("fetch", s.cfg.Fetch.String()).
		Str("queues", s.fetch.order.String()).Str("sidekiq_version", s.format.Format().String()).
		Func(func(e *zerolog.Event) {
			if s.proc.caps != nil {
				e.Str("queue_concurrency", s.proc.caps.String())
			}
		}).Msg("gojob started")
	return nil
}

// newFetcher builds the fetch of the configured mode. The reliable fetch
// writes its heartbeat and registers its lists here, retrying through a
// Redis outage until ctx ends.
func (s *Server) newFetcher(ctx context.Context) (fetch.Fetcher, error) {
	fc := &fetch.Config{
		Pool:        s.cfg.Pool,
		Dial:        s.cfg.Dial,
		Order:       s.fetch.order,
		Concurrency: s.cfg.Concurrency,
		Pipeline:    s.cfg.FetchPipeline,
		Quiet:       s.life.quietCh,
		Process:     s.proc.process,
		Writes:      s.redis.writes,
		Outage:      &s.redis.outage,
		Logger:      s.log,
		Health:      &s.fetch.health,

		ReliableConfig: fetch.ReliableConfig{
			Identity:         s.identity,
			Format:           s.format,
			Clock:            s.cfg.Clock,
			RecoveryLimit:    s.cfg.RecoveryLimit,
			RecoveryInterval: s.cfg.RecoveryInterval,
			AheadDepth:       s.cfg.FetchAhead,
			AheadHold:        s.cfg.FetchAheadHold,
			Prepare:          s.aheadPrepare(),
			Died:             s.proc.death,
			Stats:            &s.fetch.stats,
		},
	}
	switch s.cfg.Fetch {
	case FetchBatch:
		return fetch.NewBatch(fc)
	case FetchReliable:
		return fetch.NewReliable(ctx, fc)
	}
	return fetch.NewBRPOP(fc), nil
}

// aheadPrepare is the prepare of the fetches ahead the reliable fetch
// makes on its own while every slot is busy; nil (none) with queue caps,
// which count the jobs running, not those held ahead: a slot holding a
// capped queue's jobs ahead would only give them back.
//
// Without extensions there is nothing to prepare before the slot takes
// a job: the slot parses it then, on its own goroutine, rather than the
// batcher, which queues the jobs of every slot.
func (s *Server) aheadPrepare() func(*fetch.Unit) {
	if len(s.cfg.QueueConcurrency) > 0 {
		return nil
	}
	if len(s.proc.prepares) == 0 {
		return func(*fetch.Unit) {}
	}
	return s.proc.prepareAhead
}

// Run starts the server and blocks until ctx is done or a TERM signal
// arrives through Redis, then stops it gracefully. A ctx that ends while
// the server is still starting is a normal stop: Run returns nil.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		if ctx.Err() != nil && s.life.state.Load() == stateNew {
			// Stopped while starting (a dial or setup cut short by
			// the cancellation): nothing runs, so nothing failed.
			return nil
		}
		return err
	}
	select {
	case <-ctx.Done():
	case <-s.life.stopCh:
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout+10*time.Second)
	defer cancel()
	return s.Stop(stopCtx)
}

// Quiet stops fetching new jobs and polling, as TSTP does. Running jobs
// finish; the heartbeat goes on and reports quiet.
func (s *Server) Quiet() {
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

// Signal acts on a Sidekiq signal name: TSTP quiets, TERM and INT stop
// gracefully (Run returns), TTIN logs every goroutine's stack.
func (s *Server) Signal(sig string) {
	s.log.Info().Str("signal", sig).Msg("got signal")
	switch sig {
	case "TSTP":
		s.Quiet()
	case "TERM", "INT":
		s.Quiet()
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
