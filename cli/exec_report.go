package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"syscall"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/internal/procstat"
	"github.com/gojob/gojob/jobctl"
	"github.com/gojob/gojob/sidekiq"
)

// maxReportLine is the longest fd 4 line read as a report (a result
// included); a longer one is only a heartbeat.
const maxReportLine = 1 << 20

// execError is the failure of an --exec command.
type execError struct {
	ExitCode int
	Message  string
}

func (e *execError) Error() string { return e.Message }

// ErrorClass names the failure for the Web UI.
func (e *execError) ErrorClass() string { return "Gojob::ExecError" }

// reportLine is a JSON line on an exec command's fd 4
// (docs/job-control.md).
type reportLine struct {
	Progress *float64        `json:"progress"`
	Message  *string         `json:"message"`
	Result   json.RawMessage `json:"result"`
	Outcome  string          `json:"outcome"`
	In       *float64        `json:"in"`
}

// execReport collects what an exec command reports on fd 4: progress and
// result go to the job's status hash as they come, the last outcome line
// decides how the job ends.
type execReport struct {
	log     zerolog.Logger
	pool    *redis.Pool // receives the status lines; nil ignores them
	jid     string
	out     string
	in      time.Duration
	written bool // the status hash has been written
}

// line handles one line of fd 4; a line that is not a JSON object is only
// a heartbeat.
func (r *execReport) line(ctx context.Context, b []byte) {
	if len(b) == 0 || b[0] != '{' {
		return
	}
	var l reportLine
	if err := json.Unmarshal(b, &l); err != nil {
		r.log.Debug().Str("jid", r.jid).Err(err).Msg("fd 4 line is not a report; taken as a heartbeat")
		return
	}
	switch l.Outcome {
	case "":
	case "discard", "snooze", "retry_in":
		r.out = l.Outcome
		r.in = 0
		if l.In != nil && *l.In > 0 && !math.IsInf(*l.In, 0) {
			r.in = time.Duration(*l.In * float64(time.Second))
		}
	default:
		r.log.Warn().Str("jid", r.jid).Str("outcome", l.Outcome).Msg("unknown outcome on fd 4 ignored (want discard, snooze or retry_in)")
	}
	st := &jobctl.Status{Progress: l.Progress, Result: l.Result}
	if l.Message != nil {
		st.Message = *l.Message
	}
	if st.Progress == nil && st.Message == "" && len(st.Result) == 0 {
		return
	}
	if len(st.Result) > 0 && string(st.Result) == "null" {
		st.Result = nil
	}
	r.write(ctx, st)
}

// write writes to the job's status hash; a failure is logged, not the
// job's.
func (r *execReport) write(ctx context.Context, st *jobctl.Status) {
	if r.pool == nil {
		return
	}
	if err := jobctl.WriteStatus(context.WithoutCancel(ctx), r.pool, r.jid, st, time.Now()); err != nil {
		r.log.Warn().Str("jid", r.jid).Err(err).Msg("status not written")
		return
	}
	r.written = true
}

// outcome is the job's end as its last outcome line says (nil: none, the
// exit status decides), given the command's exit error. The status hash,
// once written, records the outcome.
func (r *execReport) outcome(runErr error) error {
	ctx := context.Background()
	var err error
	switch r.out {
	case "snooze":
		err = sidekiq.Snooze(r.in)
	case "discard":
		err = sidekiq.Discard(&execError{Message: "discarded by the command (fd 4 outcome)", ExitCode: exitCodeOf(runErr)})
	case "retry_in":
		err = sidekiq.RetryIn(r.in, &execError{Message: fmt.Sprintf("retry in %s asked by the command (fd 4 outcome)", r.in), ExitCode: exitCodeOf(runErr)})
	}
	if r.out != "" || r.written {
		out := r.out
		if out == "" {
			out = "success"
			if runErr != nil {
				out = "failed"
			}
		}
		r.write(ctx, &jobctl.Status{Outcome: out})
	}
	return err
}

func exitCodeOf(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return 0
}

// reapGroup waits until the process group pgid is gone, or deadline, then
// kills what is left of it and the processes carrying token.
func reapGroup(pgid int, token string, deadline time.Time) {
	for time.Now().Before(deadline) {
		if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
	procstat.KillMarked(token, 0)
}
