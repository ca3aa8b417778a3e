package sidekiq

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/gojob/gojob/sidekiq/internal/fetch"
	"github.com/gojob/gojob/sidekiq/internal/maintenance"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// workItem is one running job, shown in the work hash of the heartbeat.
type workItem struct {
	// unit is the job as fetched: its queue, its bytes, and where the
	// fetch keeps it; tid is its slot's thread id.
	unit  fetch.Unit
	tid   string
	runAt time.Time
	state atomic.Int32 // workRunning, workFinished, workAbandoned
	// class is the job's metrics class (`wrapped || class`), or "" when no
	// metrics are kept for it (a 6.x format, or no handler).
	class string
	// watch follows its heartbeats and deadlines, and ctx is the job's
	// context (heartbeat.go); cancel ends it (a missed deadline, the end of
	// the job, or the hard shutdown through cancelRunning).
	watch  jobWatch
	ctx    jobCtx
	cancel context.CancelCauseFunc
	// gate is where a middleware may hold back the acknowledgement of a
	// success (DeferAck); reliable fetches only.
	gate ackGate
}

const (
	workRunning int32 = iota
	workFinished
	workAbandoned
)

// abandon marks a running job as given up at hard shutdown; it reports
// false when the job had already finished.
func (w *workItem) abandon() bool { return w.state.CompareAndSwap(workRunning, workAbandoned) }

// finish marks a job finished; it reports false when shutdown abandoned
// (and requeued) it first.
func (w *workItem) finish() bool { return w.state.CompareAndSwap(workRunning, workFinished) }

// cancelRunning cancels the contexts of the running jobs, as cancelling
// hardCtx would cancel its children. Called at hard shutdown after
// abandonRunning, when no job can start any more.
func (s *Server) cancelRunning() {
	s.eachRunning(func(w *workItem) { w.cancel(nil) })
}

// eachRunning calls f with each slot's running job.
func (s *Server) eachRunning(f func(w *workItem)) {
	for i := range s.work {
		if w := s.work[i].Load(); w != nil {
			f(w)
		}
	}
}

// runningWork lists the running jobs for the heartbeat's work hash.
func (s *Server) runningWork() []maintenance.Work {
	var out []maintenance.Work
	s.eachRunning(func(w *workItem) {
		out = append(out, maintenance.Work{TID: w.tid, Queue: w.unit.Queue, Raw: w.unit.Raw, RunAt: w.runAt,
			HeartbeatAt: w.watch.lastBeat()})
	})
	return out
}

// handlerFor finds the handler of a job: by class, and for ActiveJob
// payloads by the job class ActiveJob itself runs (args[0].job_class, else
// `wrapped`).
func (s *Server) handlerFor(job *wire.Job) (*registration, string) {
	class := job.Class()
	if r, ok := s.handlers[class]; ok {
		return r, class
	}
	if name := job.ActiveJobClass(); name != "" {
		return s.handlers[name], name
	}
	return nil, class
}

// setProviderJobID does what the ActiveJob wrapper does before it runs a
// job: job_data.merge("provider_job_id" => jid). Only the in-memory job the
// handler sees changes.
func setProviderJobID(job *wire.Job) {
	if !job.IsActiveJob() {
		return
	}
	jid := job.JID()
	job.Map() // decoded (a fetched job's fields are read lazily) and marked changed
	if a := job.Args(); len(a) > 0 {
		if m, ok := a[0].Map(); ok {
			m.Set("provider_job_id", rubyjson.StringValue(jid))
		}
	}
}

// process runs one fetched job to completion (docs/sidekiq-wire.md#processing-order).
func (s *Server) process(slot int, tid string, u fetch.Unit) {
	queue, raw := u.Queue, u.Raw
	if s.order.Paused(queue) {
		// Popped by a fetch that was on its way when the queue was paused:
		// back to the pop end of its queue, not started.
		s.fetcher.Requeue([]fetch.Unit{u})
		return
	}
	// The fetch's reply is this job's own buffer, kept unchanged for its
	// acknowledgement: the job's strings can share it.
	var job *wire.Job
	var err error
	if p, ok := u.Prepared.(*preparedAhead); ok {
		job = p.job // parsed when it was fetched ahead (FetchAhead)
	} else {
		job, err = wire.ParseFetchedJob(raw)
	}
	if err != nil {
		// Unparsable: to the dead set unchanged, no stats (docs/sidekiq-wire.md#unparsable-payloads).
		s.log.Error().Err(err).Str("component", "processor").Str("queue", queue).
			Msg("unparsable job payload moved to the dead set unchanged")
		s.fetcher.Finish(u, &fetch.Outcome{Set: wire.KeyDead, At: s.cfg.Clock.Now(), Payload: raw})
		s.observe(queue, "", 0, err)
		return
	}
	reg, _ := s.handlerFor(job)
	lim, limErr := s.limitsOf(job)
	w := &workItem{unit: u, tid: tid, runAt: s.cfg.Clock.Now()}
	// Not a child of hardCtx: 25 workers registering with one parent
	// contend for its lock on every job. The hard shutdown cancels the
	// running jobs' contexts itself (cancelRunning), after abandonRunning
	// has made sure no job starts any more.
	cctx, cancel := context.WithCancelCause(s.jobBase)
	w.cancel = cancel
	watch := &w.watch
	watch.start(lim, cancel)
	w.ctx = jobCtx{Context: cctx, w: watch, unit: &w.unit}
	ctx := context.Context(&w.ctx)
	if reg != nil && s.format.Version().AtLeast(7, 0, 0) {
		w.class = maintenance.MetricsClass(job)
	}
	s.workMu.RLock()
	if s.abandoning {
		// Fetched before the hard shutdown but not started: push it back
		// as the shutdown did with the running jobs.
		s.workMu.RUnlock()
		watch.stop()
		cancel(nil)
		s.fetcher.Requeue([]fetch.Unit{u})
		return
	}
	s.work[slot].Store(w)
	s.workMu.RUnlock()
	s.started.Add(1)
	s.busy.Add(1)
	defer func() {
		s.work[slot].Store(nil)
		s.busy.Add(-1)
	}()

	setProviderJobID(job)
	if uniqueUntilStart(job) {
		s.releaseUnique(job)
	}
	var gate *ackGate
	if s.cfg.Fetch.Reliable() {
		gate = &w.gate
		w.ctx.gate = gate
	}
	if limErr != nil {
		err = limErr // not run: a limit that is not a number of seconds
	} else {
		err = s.execute(ctx, job, reg)
	}
	watch.stop()
	cancel(nil)
	if cause := watch.expiredCause(); cause != nil {
		// A missed deadline is the job's failure, whatever the handler or
		// middleware made of the cancellation (heartbeat.go). A handler
		// left running may still hold the job: the rest reads a copy.
		var te *TimeoutError
		var he *HeartbeatTimeoutError
		if !errors.As(err, &te) && !errors.As(err, &he) {
			if err != nil {
				s.log.Debug().Str("component", "processor").Str("jid", job.JID()).Err(err).Msg("error of a cancelled job, replaced by its deadline's")
			}
			err = cause
		}
		s.log.Warn().Str("component", "processor").Str("jid", job.JID()).Str("class", job.Class()).Str("queue", queue).
			Str("error_class", ErrorClassOf(err)).Msg(err.Error())
		if fresh, perr := wire.ParseJob(raw); perr == nil {
			setProviderJobID(fresh)
			job = fresh
		}
	}
	took := s.cfg.Clock.Now().Sub(w.runAt)
	if !w.finish() {
		// Hard shutdown requeued it while it ran; whatever happened is moot.
		return
	}
	defer func() { s.observe(queue, job.Class(), took, err) }()
	if w.class != "" {
		var ol *OverLimitError
		s.metrics.Record(w.class, took, err != nil && !errors.As(err, &ol))
	}
	if err == nil {
		s.counters.Add(1, 0)
		if gate == nil || !gate.wasDeferred() {
			s.fetcher.Finish(u, nil)
		} else {
			if d, ok := s.fetcher.(ackDeferrer); ok {
				u = d.Defer(u) // still held for the fetch's own-list sweep
			}
			s.deferredAcks.Add(1)
			if !gate.hold(s, u) {
				s.ackDeferred([]fetch.Unit{u})
			}
		}
		if !uniqueUntilStart(job) {
			s.releaseUnique(job)
		}
		return
	}
	if s.rescheduleOverLimit(u, job, err) {
		s.counters.Add(1, 0)
		return
	}
	s.counters.Add(1, 1)
	s.handleFailure(u, job, reg, err)
}

// execute runs the middleware chain and the handler, turning panics into
// *PanicError.
func (s *Server) execute(ctx context.Context, job *wire.Job, reg *registration) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Value: p, Stack: CallerStack(3)}
		}
	}()
	if reg != nil && len(s.mw) == 0 {
		return s.perform(ctx, job, reg) // no chain to build
	}
	var call func(i int) func(context.Context) error
	call = func(i int) func(context.Context) error {
		return func(ctx context.Context) error {
			if i < len(s.mw) {
				return s.mw[i](ctx, job, call(i+1))
			}
			if reg == nil {
				return &NameError{Class: job.Class()}
			}
			return s.perform(ctx, job, reg)
		}
	}
	if reg == nil {
		// Ruby fails in constantize before the server middleware runs.
		_, name := s.handlerFor(job)
		return &NameError{Class: name}
	}
	return call(0)(ctx)
}

// death calls the death handlers.
func (s *Server) death(job *wire.Job, err error) {
	for _, h := range s.cfg.DeathHandlers {
		func() {
			defer func() {
				if p := recover(); p != nil {
					s.log.Error().Interface("panic", p).Msg("death handler panicked")
				}
			}()
			h(s.hardCtx, job, err)
		}()
	}
}
