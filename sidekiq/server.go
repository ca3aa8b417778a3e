package sidekiq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/internal/clock"
)

// Handler runs jobs of one class.
type Handler interface {
	Perform(ctx context.Context, job *Job) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, job *Job) error

// Perform calls f.
func (f HandlerFunc) Perform(ctx context.Context, job *Job) error { return f(ctx, job) }

// ServerMiddleware wraps the execution of a job, first added outermost, as
// Sidekiq's server middleware chain.
type ServerMiddleware func(ctx context.Context, job *Job, next func(context.Context) error) error

// DeathHandler is called when a job dies: retries exhausted (whether or not
// it goes to the dead set), or a failure of a job with retry disabled.
type DeathHandler func(ctx context.Context, job *Job, err error)

// QueueWeight is one -q entry: a queue and its weight (0 = no weight given).
type QueueWeight struct {
	Name   string
	Weight int
}

// ParseQueueWeight reads "name" or "name,weight".
func ParseQueueWeight(s string) (QueueWeight, error) {
	name, w, found := strings.Cut(s, ",")
	if name == "" {
		return QueueWeight{}, fmt.Errorf("sidekiq: empty queue name in %q", s)
	}
	q := QueueWeight{Name: name}
	if found {
		if _, err := fmt.Sscan(w, &q.Weight); err != nil || q.Weight < 0 {
			return QueueWeight{}, fmt.Errorf("sidekiq: bad queue weight in %q", s)
		}
	}
	return q, nil
}

// ServerConfig configures a Server.
type ServerConfig struct {
	// Pool is the Redis pool for everything but the fetchers. Required.
	Pool *redis.Pool
	// Dial opens the fetch connections, which are not pooled (see
	// FetchPipeline). Default: Pool.DialContext / Pool.Dial.
	Dial func(ctx context.Context) (redis.Conn, error)
	// Queues to fetch from, in order, with optional weights (spec §4).
	// Default: [default].
	Queues []QueueWeight
	// Concurrency is the number of jobs run at once. Default 10 (Sidekiq 6.4
	// uses 10 too).
	Concurrency int
	// Fetch selects BasicFetch's BRPOP (default) or batched BLMPOP.
	Fetch FetchMode
	// FetchPipeline is, in BRPOP mode, how many idle slots' BRPOPs one
	// fetch connection carries at once, pipelined; the server opens
	// ceil(Concurrency/FetchPipeline) fetch connections. 1 gives each slot
	// its own connection and round trips, as Ruby does. Default
	// DefaultFetchPipeline (8).
	FetchPipeline int
	// ShutdownTimeout bounds the wait for running jobs at stop (-t). Default
	// 25 s.
	ShutdownTimeout time.Duration
	// JobTimeout, when set, cancels each job's context after it.
	JobTimeout time.Duration
	// Version is the Sidekiq release whose format is written. Default
	// DefaultVersion.
	Version Version
	// MaxRetries is the retry count for `"retry": true`. Default 25.
	MaxRetries int
	// Tag is the process tag shown in the Web UI (-g).
	Tag string
	// Labels are shown in the Web UI.
	Labels []string
	// Hostname overrides the host name in the identity.
	Hostname string
	// Client pushes the poller's and the API's re-enqueues. Default: a client
	// on Pool with Version.
	Client *Client
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
	if len(out.Queues) == 0 {
		out.Queues = []QueueWeight{{Name: "default"}}
	}
	if out.Concurrency <= 0 {
		out.Concurrency = 10
	}
	if out.FetchPipeline <= 0 {
		out.FetchPipeline = DefaultFetchPipeline
	}
	if out.ShutdownTimeout <= 0 {
		out.ShutdownTimeout = 25 * time.Second
	}
	if out.Version.IsZero() {
		out.Version = DefaultVersion
	}
	if out.MaxRetries <= 0 {
		out.MaxRetries = 25
	}
	out.Clock = clock.Or(out.Clock)
	if out.Hostname == "" {
		out.Hostname = os.Getenv("DYNO")
	}
	if out.Hostname == "" {
		out.Hostname, _ = os.Hostname()
	}
	if out.Tag == "" && out.Version.AtLeast(8, 0, 0) {
		// 8.0+ tags a non-Rails process with its directory's name.
		if wd, err := os.Getwd(); err == nil {
			out.Tag = filepath.Base(wd)
		}
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
	for _, q := range c.Queues {
		if q.Name == "" {
			return errors.New("sidekiq: empty queue name")
		}
	}
	return nil
}

// ErrClosed is returned by Start on a server that has already run.
var ErrClosed = errors.New("sidekiq: server closed")

// Server is a Sidekiq processing node: it fetches jobs from its queues,
// runs their handlers, retries and buries failures, polls the retry and
// schedule sets, and keeps a heartbeat so the Web UI shows it like a Ruby
// process. A Server runs once: Start, then Stop (or Run).
type Server struct {
	cfg      *ServerConfig
	log      zerolog.Logger
	client   *Client
	api      *API
	handlers map[string]*registration
	mw       []ServerMiddleware

	identity  string
	startedAt time.Time
	fetchQ    fetchOrder
	// fetchDepth is the BRPOP pipeline depth in use (FetchPipeline).
	fetchDepth atomic.Int32

	processed atomic.Int64 // not yet flushed
	failed    atomic.Int64
	busy      atomic.Int64
	work      sync.Map    // tid string → *workItem
	metrics   *jobMetrics // 7.0+ job metrics not yet flushed; nil for 6.x

	quietCh  chan struct{} // closed when quiet (fetching stops)
	quietOne sync.Once
	stopCh   chan struct{} // closed when a stop is requested
	stopOne  sync.Once
	hardCtx  context.Context // cancelled at hard shutdown
	hardStop context.CancelFunc
	// writeCtx bounds the writes that must not be lost (retry and dead
	// entries, requeues, the poller's pushes): it outlives the hard
	// shutdown and ends when Stop finishes or gives up.
	writeCtx  context.Context
	writeStop context.CancelFunc
	// workMu orders starting a job against the hard shutdown's sweep of
	// the running jobs: a job is either seen by the sweep or, once
	// abandoning is set, pushed back instead of started.
	workMu     sync.RWMutex
	abandoning bool
	state      atomic.Int32
	wg         sync.WaitGroup // fetchers
	bg         sync.WaitGroup // heartbeat, poller
	done       chan struct{}  // closed when fully stopped
	outage     outageLog
	// pollAverage is 6.4's scaled poll interval, computed at the first
	// poll and kept (only the poller goroutine uses it).
	pollAverage time.Duration
	// pollCalls counts 6.4's process_count calls (@count_calls).
	pollCalls int
	// scriptLoaded is whether the poller has sent SCRIPT LOAD.
	scriptLoaded bool
	stopErr      error
}

const (
	stateNew int32 = iota
	stateRunning
	stateStopped
)

type registration struct {
	h    Handler
	opts HandlerOptions
}

// HandlerOptions are per-class settings, the Go form of sidekiq_options and
// the class-level retry hooks.
type HandlerOptions struct {
	// Retry is used when a payload has no "retry" key: nil means true (the
	// Sidekiq default), otherwise a bool or an int.
	Retry any
	// RetryIn is sidekiq_retry_in: it returns the delay before the next
	// retry, or a RetryDecision. A zero delay with RetryDefault means the
	// default backoff.
	RetryIn func(count int, err error, job *Job) (time.Duration, RetryDecision)
	// RetriesExhausted is sidekiq_retries_exhausted. Returning RetryDiscard
	// keeps the job out of the dead set.
	RetriesExhausted func(ctx context.Context, job *Job, err error) RetryDecision
}

// RetryDecision is what a retry hook asks for.
type RetryDecision int

// Retry hook decisions.
const (
	RetryDefault RetryDecision = iota
	RetryKill                  // send to the dead set now (:kill)
	RetryDiscard               // drop the job (:discard)
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
	client := c.Client
	if client == nil {
		var err error
		client, err = NewClient(&ClientConfig{Pool: c.Pool, Version: c.Version, Clock: c.Clock})
		if err != nil {
			return nil, err
		}
	}
	api, err := NewAPI(&APIConfig{Pool: c.Pool, Version: c.Version, Clock: c.Clock, Client: client})
	if err != nil {
		return nil, err
	}
	hard, cancel := context.WithCancel(context.Background())
	writes, stopWrites := context.WithCancel(context.Background())
	s := &Server{
		api:       api,
		cfg:       c,
		log:       c.Logger,
		client:    client,
		handlers:  map[string]*registration{},
		identity:  fmt.Sprintf("%s:%d:%s", c.Hostname, os.Getpid(), NewJID()[:12]),
		fetchQ:    newFetchOrder(c.Queues, c.Version),
		metrics:   newJobMetrics(c.Version),
		quietCh:   make(chan struct{}),
		stopCh:    make(chan struct{}),
		hardCtx:   hard,
		hardStop:  cancel,
		writeCtx:  writes,
		writeStop: stopWrites,
		done:      make(chan struct{}),
	}
	s.outage.log = &s.log
	return s, nil
}

// Handle registers h for jobs whose class (or, for ActiveJob payloads, whose
// wrapped job class) is class. Call it before Start.
func (s *Server) Handle(class string, h Handler, opts *HandlerOptions) {
	r := &registration{h: h}
	if opts != nil {
		r.opts = *opts
	}
	s.handlers[class] = r
}

// HandleFunc registers a function.
func (s *Server) HandleFunc(class string, f func(ctx context.Context, job *Job) error) {
	s.Handle(class, HandlerFunc(f), nil)
}

// Use appends server middleware. Call it before Start.
func (s *Server) Use(mw ...ServerMiddleware) { s.mw = append(s.mw, mw...) }

// Identity returns the process identity ("host:pid:nonce").
func (s *Server) Identity() string { return s.identity }

// DeathHandlers returns the configured death handlers (for components such
// as the durable reconciler that kill jobs on the server's behalf).
func (s *Server) DeathHandlers() []DeathHandler { return s.cfg.DeathHandlers }

// Client returns the client the server re-pushes with.
func (s *Server) Client() *Client { return s.client }

// Done is closed when the server has stopped.
func (s *Server) Done() <-chan struct{} { return s.done }

// Start starts fetching, the heartbeat and the poller, and returns.
func (s *Server) Start(ctx context.Context) error {
	if !s.state.CompareAndSwap(stateNew, stateRunning) {
		return ErrClosed
	}
	s.startedAt = s.cfg.Clock.Now()
	if err := s.heartbeat(ctx); err != nil {
		s.log.Warn().Err(err).Str("component", "heartbeat").Msg("first heartbeat failed; retrying in the background")
	}
	s.startFetchers()
	s.bg.Add(1)
	go s.heartbeatLoop()
	if !s.cfg.DisablePoller {
		s.bg.Add(1)
		go s.pollLoop()
	}
	s.log.Info().Str("identity", s.identity).Int("concurrency", s.cfg.Concurrency).
		Str("queues", s.fetchQ.String()).Str("sidekiq_version", s.cfg.Version.String()).Msg("gojob started")
	return nil
}

// Run starts the server and blocks until ctx is done or a TERM signal
// arrives through Redis, then stops it gracefully.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-s.stopCh:
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout+10*time.Second)
	defer cancel()
	return s.Stop(stopCtx)
}

// Quiet stops fetching new jobs and polling, as TSTP does. Running jobs
// finish; the heartbeat goes on and reports quiet.
func (s *Server) Quiet() {
	s.quietOne.Do(func() {
		s.log.Info().Str("identity", s.identity).Msg("quiet: no new jobs will be fetched")
		close(s.quietCh)
	})
}

// IsQuiet reports whether the server is quiet.
func (s *Server) IsQuiet() bool {
	select {
	case <-s.quietCh:
		return true
	default:
		return false
	}
}

func (s *Server) requestStop() {
	s.stopOne.Do(func() { close(s.stopCh) })
}

// Stop shuts down gracefully: quiet, wait up to ShutdownTimeout (or ctx) for
// running jobs, push the unfinished ones back to their queues with their
// original bytes, flush stats, and remove the process from the registry.
func (s *Server) Stop(ctx context.Context) error {
	if s.state.Load() == stateNew {
		return errors.New("sidekiq: server not started")
	}
	if !s.state.CompareAndSwap(stateRunning, stateStopped) {
		<-s.done
		return s.stopErr
	}
	s.Quiet()
	s.requestStop()
	fetchersDone := make(chan struct{})
	go func() { s.wg.Wait(); close(fetchersDone) }()
	timer := time.NewTimer(s.cfg.ShutdownTimeout)
	defer timer.Stop()
	hard := true
	select {
	case <-fetchersDone:
		hard = false
	case <-timer.C:
		s.log.Warn().Int64("busy", s.busy.Load()).Msg("shutdown timeout: requeueing unfinished jobs")
	case <-ctx.Done():
		s.log.Warn().Int64("busy", s.busy.Load()).Msg("shutdown cancelled: requeueing unfinished jobs")
	}
	// The caller's ctx may be spent by now; the requeue and the goodbye
	// still get a few seconds of their own, since skipping them loses jobs.
	final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	stopWrites := context.AfterFunc(final, s.writeStop)
	defer stopWrites()
	// Give up the running jobs before cancelling their contexts: a handler
	// that returns as soon as its context ends must find its job already
	// abandoned (Ruby raises Sidekiq::Shutdown, which is never retried),
	// not fail it into the retry set or, with retry: false, drop it.
	items := s.abandonRunning()
	s.hardStop()
	var errs []error
	if err := s.requeueUnfinished(items); err != nil {
		errs = append(errs, err)
	}
	if hard {
		// As manager.rb#hard_shutdown, give the fetchers up to 3 s: an
		// idle one may still be in its 2 s BRPOP and receive a job (the
		// requeued ones included), which it must push back before the
		// process goes; a failure may still be writing its retry entry.
		grace := time.NewTimer(hardShutdownGrace)
		select {
		case <-fetchersDone:
		case <-grace.C:
			s.log.Warn().Dur("waited", hardShutdownGrace).Msg("shutdown: some fetchers did not stop (a handler ignoring its cancelled context?); leaving them behind")
		case <-final.Done():
		}
		grace.Stop()
	}
	s.bg.Wait()
	if err := s.unregister(final); err != nil {
		errs = append(errs, err)
	}
	s.writeStop()
	s.stopErr = errors.Join(errs...)
	close(s.done)
	s.log.Info().Str("identity", s.identity).Msg("gojob stopped")
	return s.stopErr
}

// hardShutdownGrace is how long Stop waits for the fetchers after a hard
// shutdown: the BRPOP timeout plus a second (Ruby waits 3 s for its
// processor threads).
const hardShutdownGrace = (fetchTimeout + 1) * time.Second

// abandonRunning marks every running job abandoned and returns them. From
// now on a fetched job is pushed back instead of started. Ruby counts a job
// killed at hard shutdown as processed and failed (Processor#stats' rescue
// and ensure run when Sidekiq::Shutdown is raised in the thread), so gojob
// counts them too.
func (s *Server) abandonRunning() []*workItem {
	s.workMu.Lock()
	defer s.workMu.Unlock()
	s.abandoning = true
	var items []*workItem
	s.work.Range(func(_, v any) bool {
		w := v.(*workItem)
		if w.abandon() {
			items = append(items, w)
		}
		return true
	})
	s.processed.Add(int64(len(items)))
	s.failed.Add(int64(len(items)))
	for _, w := range items {
		if w.class != "" {
			// The metrics middleware sees Sidekiq::Shutdown too.
			s.metrics.record(w.class, 0, true)
		}
	}
	return items
}

// requeueUnfinished pushes the abandoned jobs back to the right end of their
// queues, so they run next, as Sidekiq's bulk_requeue: one pipeline with one
// `RPUSH queue:<q> job…` per queue. It retries through a Redis outage until
// Stop's deadline.
func (s *Server) requeueUnfinished(items []*workItem) error {
	if len(items) == 0 {
		return nil
	}
	var order []string
	byQueue := map[string][]any{}
	for _, w := range items {
		if _, ok := byQueue[w.queue]; !ok {
			order = append(order, w.queue)
		}
		byQueue[w.queue] = append(byQueue[w.queue], w.raw)
	}
	err := s.withRetry(func(conn redis.Conn) error {
		for _, q := range order {
			conn.Send("RPUSH", append([]any{QueueKey(q)}, byQueue[q]...)...)
		}
		replies, err := redis.Values(redis.DoContext(conn, s.writeCtx, ""))
		for _, r := range replies {
			if e, ok := r.(redis.Error); ok && err == nil {
				err = e
			}
		}
		return err
	})
	if err != nil {
		for _, w := range items {
			s.log.Error().Str("queue", w.queue).Bytes("payload", w.raw).Msg("could not requeue job at shutdown")
		}
		return fmt.Errorf("sidekiq: requeue %d jobs: %w", len(items), err)
	}
	s.log.Info().Int("jobs", len(items)).Msg("requeued unfinished jobs")
	return nil
}
