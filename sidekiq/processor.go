package sidekiq

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/internal/fetch"
	"github.com/gojob/gojob/sidekiq/internal/maintenance"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
	"github.com/gojob/gojob/sidekiq/wire"
)

// processor runs the jobs the fetch hands to its slots: it takes a job
// (parsed, given its slot and deadlines), runs it through the extensions,
// the middleware and its handler, and finishes it (acknowledgement,
// retry, dead set, metrics). The order is Sidekiq's
// (docs/sidekiq-wire.md#processing-order).
type processor struct {
	cfg      *ServerConfig
	log      *zerolog.Logger
	identity string
	format   *contract.LiveFormat
	order    *fetch.Order
	// fetcher is the server's fetch, set by Start before any job runs.
	fetcher fetch.Fetcher
	writes  *redisx.Retrier
	// hardCtx ends at the hard shutdown (death handlers and hooks get it);
	// jobBase is its values without its cancellation: the parent of every
	// job's context.
	hardCtx context.Context
	jobBase context.Context

	// quiet is closed when the server stops taking jobs (Stopping).
	quiet <-chan struct{}

	handlers map[string]*registration
	mw       []Middleware
	// The extensions' hooks (extension.go), in the order they were added.
	prepares  []prepareHook
	runs      []runHook
	deaths    []DeathHook
	observers []JobObserver

	slots []slotCell // by slot: the job it runs and the jobs it started
	// workMu orders starting a job against the hard shutdown's sweep of
	// the running jobs: a job is either seen by the sweep or, once
	// abandoning is set, pushed back instead of started.
	workMu     sync.RWMutex
	abandoning bool
	// leftBehind counts the handlers still running after their job was
	// cancelled for a missed deadline and given up (deadlines.go).
	leftBehind atomic.Int64
	// held counts successful jobs whose acknowledgement an extension holds
	// back (Run.HoldAck).
	held     sync.WaitGroup
	counters *maintenance.Counters   // processed and failed, not yet flushed
	metrics  *maintenance.JobMetrics // job metrics, written by 7.0+ formats
	caps     *queueCaps              // ServerConfig.QueueConcurrency; nil: none
}

// slotCell is one slot's running job (nil when idle) and the count of
// jobs it started, alone on its cache lines: with one counter shared by
// every slot, each job would move that counter's line between the cores.
type slotCell struct {
	work    atomic.Pointer[workItem]
	started atomic.Int64
	_       [cacheLine - 16]byte
}

// cacheLine is the size of a CPU cache line on the usual 64-bit targets
// (128 covers the adjacent-line prefetch of x86 and Apple's cores).
const cacheLine = 128

// busy is the number of slots running a job.
func (p *processor) busy() int {
	n := 0
	for i := range p.slots {
		if p.slots[i].work.Load() != nil {
			n++
		}
	}
	return n
}

// started is the number of jobs started so far.
func (p *processor) started() int64 {
	var n int64
	for i := range p.slots {
		n += p.slots[i].started.Load()
	}
	return n
}

// workItem is one running job, shown in the work hash of the heartbeat.
type workItem struct {
	// unit is the job as fetched: its queue, its bytes, and where the
	// fetch keeps it. (Its slot's thread id is the slot's: fetch.TIDFor.)
	unit  fetch.Unit
	runAt time.Time
	state atomic.Int32 // workRunning, workFinished, workAbandoned
	slot  int32        // the slot running it
	job   *wire.Job
	reg   *registration // nil when no handler takes the class
	// class is the job's metrics class (`wrapped || class`), or "" when no
	// metrics are kept for it (a 6.x format, or no handler).
	class string
	// watch follows its heartbeats and deadlines, and ctx is the job's
	// context (deadlines.go), cancelled by a missed deadline, the end of
	// the job, or the hard shutdown through cancelRunning.
	watch jobWatch
	ctx   jobCtx
	// gate is where an extension may hold back the acknowledgement of a
	// success (Run.HoldAck); reliable fetches only. It is made by the
	// first HoldAck: most jobs never need one, and a work item is
	// allocated per job.
	gate atomic.Pointer[ackGate]
	// outcome is what Server.CancelRunning asked to make of the job's
	// result; run swaps in ranOutcome when it reads it (cancel_running.go).
	outcome atomic.Pointer[outcomeFunc]
	// run is the job as the first extension sees it.
	run Run
	// parsed holds job when the processor parsed it (not fetched ahead).
	parsed wire.Job
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

// handlerFor finds the handler of a job: by class, and for ActiveJob
// payloads by the job class ActiveJob itself runs (args[0].job_class, else
// `wrapped`).
func (p *processor) handlerFor(job *wire.Job) (*registration, string) {
	class := job.Class()
	if r, ok := p.handlers[class]; ok {
		return r, class
	}
	if name := contract.ActiveJobClass(job); name != "" {
		return p.handlers[name], name
	}
	return nil, class
}

// cancelRunning cancels the contexts of the running jobs, as cancelling
// hardCtx would cancel its children. Called at hard shutdown after
// abandonRunning, when no job can start any more.
func (p *processor) cancelRunning() {
	p.eachRunning(func(w *workItem) { w.ctx.cancelJob(nil) })
}

// abandonRunning marks every running job abandoned and returns them. From
// now on a fetched job is pushed back instead of started. Ruby counts a job
// killed at hard shutdown as processed and failed (Processor#stats' rescue
// and ensure run when Sidekiq::Shutdown is raised in the thread), so gojob
// counts them too.
func (p *processor) abandonRunning() []fetch.Unit {
	p.workMu.Lock()
	defer p.workMu.Unlock()
	p.abandoning = true
	var units []fetch.Unit
	p.eachRunning(func(w *workItem) {
		if w.abandon() {
			units = append(units, w.unit)
			if w.class != "" {
				// The metrics middleware sees Sidekiq::Shutdown too.
				p.metrics.Record(int(w.slot), w.class, 0, true)
			}
		}
	})
	p.counters.Add(0, int64(len(units)), int64(len(units)))
	return units
}

// eachRunning calls f with each slot's running job.
func (p *processor) eachRunning(f func(w *workItem)) {
	for i := range p.slots {
		if w := p.slots[i].work.Load(); w != nil {
			f(w)
		}
	}
}

// runningWork lists the running jobs for the heartbeat's work hash.
func (p *processor) runningWork() []maintenance.Work {
	var out []maintenance.Work
	for slot := range p.slots {
		w := p.slots[slot].work.Load()
		if w == nil {
			continue
		}
		out = append(out, maintenance.Work{TID: fetch.TIDFor(slot), Queue: w.unit.Queue, Raw: w.unit.Raw, RunAt: w.runAt,
			HeartbeatAt: w.watch.lastBeat()})
	}
	return out
}

// death calls the death handlers.
func (p *processor) death(job *wire.Job, err error) {
	for _, h := range p.cfg.DeathHandlers {
		func() {
			defer func() {
				if r := recover(); r != nil {
					p.log.Error().Interface("panic", r).Msg("death handler panicked")
				}
			}()
			h(p.hardCtx, job, err)
		}()
	}
	for _, h := range p.deaths {
		func() {
			defer func() {
				if r := recover(); r != nil {
					p.log.Error().Interface("panic", r).Msg("death hook panicked")
				}
			}()
			h.JobDied(p.hardCtx, job, err)
		}()
	}
}

// observe tells the observers about a finished job.
func (p *processor) observe(queue, class string, took time.Duration, err error) {
	for _, o := range p.observers {
		o.JobDone(queue, class, took, err)
	}
}
