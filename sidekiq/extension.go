package sidekiq

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gojob/gojob/internal/fetchedjob"
	"github.com/gojob/gojob/internal/fetchmode"
	"github.com/gojob/gojob/sidekiq/internal/fetch"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Extension takes part in a job's life where a middleware cannot: once
// per push with every job the push writes (PushHook), when a job is
// fetched ahead of its slot (PrepareHook), around each run with access to
// the job's slot (RunHook), when a job dies (DeathHook) and when the
// server has finished a job (JobObserver). An extension is any value that
// implements at least one of these; a hook it does not implement costs
// nothing, and a ScopedExtension's prepare and run hooks see only the jobs
// whose payload has one of its keys, so that a feature no job uses costs
// no per-job work. The durable package's extension implements the first
// three: it writes a push's SQL rows in one statement, locks a job's row
// while the slot still runs the previous job, and deletes the rows of
// completed jobs in groups without making the slots wait.
//
// Extensions are set in ServerConfig.Extensions or with Server.Extend
// (the server's own client gets them too), and ClientConfig.Extensions or
// Client.Extend. Their hooks run in that order, outside the middleware:
// an extension's Run sees every middleware's failure.
type Extension any

// PushHook is called once per push after the client middleware, before
// anything of the push reaches Redis, with the jobs it writes: one for
// Push and PushPayload, up to a bulk batch (1,000) for PushBulk. A
// scheduled job carries "at" (epoch seconds) there, as the middleware sees
// it. An error aborts the push of those jobs.
type PushHook interface {
	BeforePush(ctx context.Context, jobs []*wire.Job) error
}

// PrepareHook is called with a job its slot fetched ahead (Run.FetchAhead),
// on the goroutine that fetched it, before the job can start; what it
// returns is that job's Run.Prepared in the extension's RunHook. A job
// prepared may still go back to its queue without running (at a quiet, or
// when its slot has not taken it within 25 ms): Prepare must leave nothing
// that a later run of the job, here or in another process, would not make
// right. Prepare is not called for a payload that cannot be parsed.
type PrepareHook interface {
	Prepare(run *Run) any
}

// RunHook runs a job: next runs the rest of the chain (later extensions,
// the server middleware, the handler). It returns the job's outcome, as a
// middleware does.
type RunHook interface {
	Run(ctx context.Context, run *Run, next func(context.Context) error) error
}

// DeathHook is told about a job that died (moved to the dead set, or
// discarded on its last failure), after the ServerConfig.DeathHandlers.
type DeathHook interface {
	JobDied(ctx context.Context, job *wire.Job, err error)
}

// JobObserver is an extension told about every job the server finishes
// (metrics exporters; package metrics). JobDone runs on the job's slot
// after its outcome is written: it must be quick and must not block.
type JobObserver interface {
	// JobDone reports a finished job: err is nil for a success or a
	// Snooze, an *OverLimitError for a job rescheduled by a limiter,
	// otherwise its failure. class is "" for a payload that could not be
	// parsed.
	JobDone(queue, class string, took time.Duration, err error)
}

// ScopedExtension is an extension whose PrepareHook and RunHook concern
// only the jobs whose payload has one of PayloadKeys (a batch's jobs
// carry its id, say): the other jobs skip them. PayloadKeys is read once,
// when the extension is added.
type ScopedExtension interface {
	PayloadKeys() []string
}

// errNoHook is the error for an extension that implements no hook.
func errNoHook(e Extension) error {
	return fmt.Errorf("sidekiq: extension %T implements none of PushHook, PrepareHook, RunHook, DeathHook, JobObserver", e)
}

// hasHook reports whether e implements at least one hook.
func hasHook(e Extension) bool {
	switch e.(type) {
	case PushHook, PrepareHook, RunHook, DeathHook, JobObserver:
		return true
	}
	return false
}

// scope is the payload keys a scoped hook concerns (nil: every job).
type scope []string

func scopeOf(e Extension) scope {
	if s, ok := e.(ScopedExtension); ok {
		return append(scope{}, s.PayloadKeys()...)
	}
	return nil
}

// covers reports whether the hook concerns job.
func (s scope) covers(job *wire.Job) bool {
	if s == nil {
		return true
	}
	for _, k := range s {
		if job.Has(k) {
			return true
		}
	}
	return false
}

// runHook is a RunHook as the processor keeps it: prep is the position of
// the same extension's PrepareHook in processor.prepares, -1 for none.
type runHook struct {
	hook  RunHook
	scope scope
	prep  int
}

type prepareHook struct {
	hook  PrepareHook
	scope scope
}

// extend adds extensions' hooks to the processor.
func (p *processor) extend(exts ...Extension) {
	for _, e := range exts {
		sc := scopeOf(e)
		prep := -1
		if h, ok := e.(PrepareHook); ok {
			prep = len(p.prepares)
			p.prepares = append(p.prepares, prepareHook{hook: h, scope: sc})
		}
		if h, ok := e.(RunHook); ok {
			p.runs = append(p.runs, runHook{hook: h, scope: sc, prep: prep})
		}
		if h, ok := e.(DeathHook); ok {
			p.deaths = append(p.deaths, h)
		}
		if h, ok := e.(JobObserver); ok {
			p.observers = append(p.observers, h)
		}
	}
}

// Run is a job as an Extension sees it, and what the extension may ask
// of the slot that runs it.
type Run struct {
	// Job is the job.
	Job *wire.Job
	// Identity is the identity of the process that runs it
	// (Server.Identity).
	Identity string
	// Prepared is what the extension's Prepare returned when the job was
	// fetched ahead, nil otherwise.
	Prepared any

	p *processor
	w *workItem // nil in Prepare
}

// FetchAhead tells the fetch that this job is about to wait for something
// other than its own work (a database round trip, say), so that its slot
// may take its next jobs meanwhile: each is given to the extensions'
// Prepare as soon as it is fetched. Only the reliable fetch fetches ahead:
// the jobs wait in the process's in-progress list, where a crash leaves
// them recoverable, and go back to the pop end of their queue when the
// server goes quiet or when the slot has not taken the oldest within 25
// ms. A slot holds at most ServerConfig.FetchAhead jobs ahead (sixteen by
// default), fewer when its last job took more than 0.75 ms, fetches ahead
// only when its last job took less than 5 ms, and never blocks for one (sidekiq/internal/fetch/ahead.go). It
// reports whether the slot fetches ahead; a second call for the same job,
// or a call from Prepare, does nothing and reports false.
func (r *Run) FetchAhead() bool {
	if r.w == nil {
		return false
	}
	return r.p.fetchAhead(&r.w.unit)
}

// HoldAck holds back the acknowledgement of the job's success until
// release is called: with the reliable fetch the job stays in its
// in-progress list (where a live process recovers it if this one dies)
// while its slot runs the next job. ok is false when the fetch keeps no
// running job in Redis (basic fetch) or from Prepare: the extension must
// then finish its work before Run returns. release must be called once,
// whatever happens (it is safe from any goroutine); it does nothing when
// the job did not succeed (its failure was written already) or was given
// back at a hard shutdown. Server.Stop waits for held acknowledgements,
// within its shutdown deadline, before it closes the fetch.
func (r *Run) HoldAck() (release func(), ok bool) {
	if r.w == nil || r.p.cfg.Fetch != fetchmode.Reliable {
		return nil, false
	}
	g := r.w.gate.Load()
	if g == nil {
		r.w.gate.CompareAndSwap(nil, new(ackGate)) // a racing HoldAck's may win
		g = r.w.gate.Load()
	}
	g.add()
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			g.releaseOne()
		}
	}, true
}

// OnHeartbeat adds f to what Heartbeat does for this job: a handler's
// heartbeat (Heartbeat, a line on an exec handler's fd 4, a POST to the
// heartbeat endpoint) calls f with the handler's context after it restarts
// the job's heartbeat_timeout, and returns f's error when the job is not
// cancelled. Heartbeat is called often and must stay cheap: f should
// throttle and do slow work in the background. Call it from Run before
// next.
func (r *Run) OnHeartbeat(f func(ctx context.Context) error) {
	if r.w != nil {
		r.w.watch.hooks = append(r.w.watch.hooks, f)
	}
}

// runFor returns the Run the i-th run hook sees.
func (w *workItem) runFor(p *processor, i int) *Run {
	r := &w.run
	if i > 0 {
		c := w.run
		r = &c
	}
	r.Prepared = nil
	if a, ok := w.unit.Prepared.(*preparedAhead); ok {
		if k := p.runs[i].prep; k >= 0 && k < len(a.exts) {
			r.Prepared = a.exts[k]
		}
	}
	return r
}

// preparedAhead is a job fetched ahead and prepared: the job parsed (the
// processor runs it as it is) and what each PrepareHook returned.
// Without prepare hooks a unit's Prepared is the parsed *wire.Job alone.
type preparedAhead struct {
	job  *wire.Job
	exts []any
}

// fetchAhead lets the slot of u fetch ahead; each next job is parsed and,
// when an extension prepares jobs, prepared.
func (p *processor) fetchAhead(u *fetch.Unit) bool {
	if len(p.prepares) == 0 {
		return u.FetchAhead(nil)
	}
	return u.FetchAhead(p.prepareAhead)
}

// prepareAhead parses a job fetched ahead and has the extensions prepare
// it, on the goroutine that fetched it.
func (p *processor) prepareAhead(next *fetch.Unit) {
	job, err := fetchedjob.Parse[wire.Job](next.Raw)
	if err != nil {
		return // the processor sends it to the dead set
	}
	var a *preparedAhead
	for i, h := range p.prepares {
		if !h.scope.covers(job) {
			continue
		}
		if a == nil {
			a = &preparedAhead{job: job, exts: make([]any, len(p.prepares))}
		}
		a.exts[i] = h.hook.Prepare(&Run{Job: job, Identity: p.identity, p: p})
	}
	if a == nil {
		next.Prepared = job // nothing else to keep: no allocation for it
		return
	}
	next.Prepared = a
}

// ackGate is where the processor and the extensions that held back a
// success's acknowledgement meet: whoever comes last acknowledges the job.
type ackGate struct {
	mu    sync.Mutex
	holds int
	// p and unit are the acknowledgement the processor left (hold).
	p    *processor
	unit fetch.Unit
}

func (g *ackGate) add() {
	g.mu.Lock()
	g.holds++
	g.mu.Unlock()
}

// heldBack reports whether an extension holds the acknowledgement.
func (g *ackGate) heldBack() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.holds > 0
}

// hold gives the gate the acknowledgement of u while an extension holds
// it; false means: acknowledge now.
func (g *ackGate) hold(p *processor, u fetch.Unit) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.holds == 0 {
		return false
	}
	g.p, g.unit = p, u
	return true
}

// releaseOne ends one hold; the last one sends the acknowledgement the
// processor left, if any.
func (g *ackGate) releaseOne() {
	g.mu.Lock()
	g.holds--
	if g.holds > 0 || g.p == nil {
		g.mu.Unlock()
		return
	}
	p, u := g.p, g.unit
	g.p, g.unit = nil, fetch.Unit{}
	g.mu.Unlock()
	p.ackHeld([]fetch.Unit{u})
}

// ackDeferrer is a fetch that must know which finished jobs'
// acknowledgement is held back: its slots have moved on, and its own-list
// sweep must not take those jobs for orphans.
type ackDeferrer interface {
	Defer(u fetch.Unit) fetch.Unit
}

// successFinisher is a fetch that takes many successes at once.
type successFinisher interface {
	FinishSuccesses(units []fetch.Unit)
}

// ackHeld acknowledges successes whose acknowledgement was held back.
func (p *processor) ackHeld(units []fetch.Unit) {
	if f, ok := p.fetcher.(successFinisher); ok {
		f.FinishSuccesses(units)
	} else {
		for _, u := range units {
			p.fetcher.Finish(u, nil)
		}
	}
	p.held.Add(-len(units))
}
