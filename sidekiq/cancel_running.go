package sidekiq

import (
	"github.com/gojob/gojob/sidekiq/wire"

	"github.com/gojob/gojob/internal/fetchedjob"
)

// outcomeFunc turns what a cancelled job's chain returned into its outcome.
type outcomeFunc func(error) error

// ranOutcome marks a job whose outcome is decided: a cancel that comes
// later does not apply.
var ranOutcome outcomeFunc = func(err error) error { return err }

// RunningJIDs returns the jids of the jobs this server runs now. It reads
// them from the fetched payloads, not from the running jobs, which their
// handlers may be changing.
func (s *Server) RunningJIDs() []string {
	var out []string
	s.proc.eachRunning(func(w *workItem) {
		if w.state.Load() != workRunning {
			return
		}
		if job, err := fetchedjob.Parse[wire.Job](w.unit.Raw); err == nil && job.JID() != "" {
			out = append(out, job.JID())
		}
	})
	return out
}

// CancelRunning cancels the job jid that this server runs now: its
// context ends with cause (context.Cause gives it to the handler), and
// outcome, when not nil, is called once with what the job's extensions,
// middleware and handler return, nil for a success, and returns the job's
// outcome instead (a sidekiq.Kill to send it to the dead set, say). It
// reports whether the job ran here and its outcome was not decided yet;
// a job that ends as it is cancelled keeps its own outcome. Every running
// copy of jid is cancelled (a job may run twice after a recovery).
func (s *Server) CancelRunning(jid string, cause error, outcome func(error) error) bool {
	f := outcomeFunc(outcome)
	if outcome == nil {
		f = ranOutcome
	}
	found := false
	s.proc.eachRunning(func(w *workItem) {
		if w.state.Load() != workRunning {
			return
		}
		job, err := fetchedjob.Parse[wire.Job](w.unit.Raw)
		if err != nil || job.JID() != jid {
			return
		}
		if w.outcome.CompareAndSwap(nil, &f) {
			found = true
			w.ctx.cancelJob(cause)
		}
	})
	return found
}
