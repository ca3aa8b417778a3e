package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/procstat"
	"github.com/gojob/gojob/jobctl"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
	"github.com/gojob/gojob/tracing"
)

// execHandler runs a shell command per job: the payload JSON on stdin,
// GOJOB_JID, GOJOB_CLASS and GOJOB_QUEUE in the environment. Exit status 0
// is success; otherwise the job fails with the last non-empty line of
// stderr as its error message. A cancelled job (hard shutdown, timeout,
// missed heartbeat) kills the command's process group, and so does the end
// of gojob itself, kill -9 included (execGuard), so that a job recovered by
// another process never runs twice at the same time.
//
// The command heartbeats (docs/heartbeats.md) by writing a line to the file
// descriptor GOJOB_HEARTBEAT_FD (4): `echo >&4` in a shell. The job's
// heartbeat_timeout and timeout, when set, are in GOJOB_HEARTBEAT_TIMEOUT
// and GOJOB_TIMEOUT (seconds). Every line is a heartbeat; a line that is a
// JSON object also reports (docs/job-control.md): {"progress":0.4,
// "message":"…"} and {"result":…} go to the job's status hash, and
// {"outcome":"discard"|"snooze"|"retry_in","in":SECONDS} decides how the
// job ends, whatever the exit status.
//
// A job cancelled on request (jobctl) gets TERM on its process group, and
// KILL on what is left of it and of the processes carrying its token
// after Grace.
type execHandler struct {
	Command string
	Log     zerolog.Logger
	// Pool receives the status lines; nil ignores them.
	Pool *redis.Pool
	// Grace is the time between TERM and KILL of a cancelled command.
	Grace time.Duration
}

// execGuard runs the job's command (GOJOB_EXEC_COMMAND) in a shell that is
// the leader of its own process group, beside a watcher that reads fd 3: a
// pipe whose only writer is gojob. When gojob ends, however it ends, the
// kernel closes the writer, the read returns, and the watcher kills what
// the command started: first the processes outside the group that carry
// the job's GOJOB_EXEC_TOKEN in their environment (a descendant that left
// the group with setsid), then the whole group, itself included. After a
// normal end of the command the shell kills its watcher first.
//
// A descendant that cleared its environment, or runs as another user, is
// not found that way (README, "Running a queue in Go").
const execGuard = `( read -r _ <&3
  read -r gojob_s < /proc/self/stat; gojob_s=${gojob_s##*) }; set -- $gojob_s; gojob_group=$3
  for gojob_f in $(grep -laF "GOJOB_EXEC_TOKEN=$GOJOB_EXEC_TOKEN" /proc/[0-9]*/environ); do
    gojob_p=${gojob_f#/proc/}; gojob_p=${gojob_p%/environ}
    read -r gojob_s < /proc/$gojob_p/stat || continue
    gojob_s=${gojob_s##*) }; set -- $gojob_s
    [ "$3" = "$gojob_group" ] || kill -KILL "$gojob_p"
  done
  kill -KILL 0 ) >/dev/null 2>&1 &
gojob_watcher=$!
exec 3<&-
gojob_cmd=$GOJOB_EXEC_COMMAND
unset GOJOB_EXEC_COMMAND
eval "$gojob_cmd"
gojob_status=$?
kill $gojob_watcher 2>/dev/null
exit $gojob_status`

// Perform runs the command.
func (h *execHandler) Perform(ctx context.Context, job *wire.Job) error {
	// The read end goes to the child as fd 3; gojob keeps the write end,
	// close-on-exec, so no other child inherits it.
	guardR, guardW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("run %q: %w", h.Command, err)
	}
	defer guardW.Close()
	// The heartbeat pipe: the command writes to fd 4, gojob reads.
	beatR, beatW, err := os.Pipe()
	if err != nil {
		guardR.Close()
		return fmt.Errorf("run %q: %w", h.Command, err)
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", execGuard)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Every process the command starts inherits the token (unless it
	// clears its environment): a cancellation kills the group and those
	// that left it.
	token := "GOJOB_EXEC_TOKEN=" + uuid.NewString()
	var reaped chan struct{} // set when a cancel request sent TERM
	cmd.Cancel = func() error {
		var ce *jobctl.CancelledError
		if errors.As(context.Cause(ctx), &ce) && h.Grace > 0 {
			// What survives TERM is killed at the grace, while Wait may
			// still wait for the pipes the survivors hold.
			reaped = make(chan struct{})
			deadline := time.Now().Add(h.Grace)
			go func() {
				defer close(reaped)
				reapGroup(cmd.Process.Pid, token, deadline)
			}()
			return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		}
		err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		procstat.KillMarked(token, 0)
		return err
	}
	cmd.WaitDelay = 5 * time.Second
	cmd.ExtraFiles = []*os.File{guardR, beatW}
	cmd.Stdin = bytes.NewReader(job.Bytes())
	cmd.Env = append(os.Environ(), "GOJOB_EXEC_COMMAND="+h.Command, token,
		"GOJOB_JID="+job.JID(), "GOJOB_CLASS="+job.Class(), "GOJOB_QUEUE="+job.Queue(),
		fmt.Sprintf("GOJOB_HEARTBEAT_FD=%d", execHeartbeatFD))
	cmd.Env = append(cmd.Env, limitEnv(job)...)
	if tp := tracing.Traceparent(ctx); tp != "" { // docs/tracing.md
		cmd.Env = append(cmd.Env, "TRACEPARENT="+tp)
	}
	stderr := &tailBuffer{max: 64 << 10}
	cmd.Stderr = stderr
	cmd.Stdout = &logWriter{log: h.Log, jid: job.JID()}
	err = cmd.Start()
	guardR.Close()
	beatW.Close()
	beats := make(chan struct{})
	rep := &execReport{log: h.Log, pool: h.Pool, jid: job.JID()}
	var exited atomic.Bool
	go func() {
		defer close(beats)
		readBeats(ctx, beatR, rep, &exited)
	}()
	if err == nil {
		err = cmd.Wait()
	}
	if reaped != nil {
		<-reaped
	}
	// The reader reads on to the end of what the command wrote (its last
	// lines, a result, may still be in the pipe), then stops at EOF; or,
	// when children the command left behind hold the write end, once
	// nothing more comes for reportDrain (readBeats). Closing the read end
	// instead could drop those last lines.
	exited.Store(true)
	if beatR.SetReadDeadline(time.Now().Add(reportDrain)) != nil {
		beatR.Close() // not pollable: end the reader the blunt way
	}
	<-beats
	beatR.Close()
	if ctx.Err() != nil {
		if rep.written {
			rep.write(context.Background(), &jobctl.Status{Outcome: "cancelled"})
		}
		return fmt.Errorf("command cancelled: %w", ctx.Err())
	}
	if out := rep.outcome(err); out != nil {
		return out
	}
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		msg := lastLine(stderr.Bytes())
		if msg == "" {
			msg = fmt.Sprintf("command exited with status %d", ee.ExitCode())
		}
		return &execError{ExitCode: ee.ExitCode(), Message: msg}
	}
	return fmt.Errorf("run %q: %w", h.Command, err)
}

// reportDrain is how long the fd 4 reader waits, once the command has
// exited, for more from children that still hold the pipe.
const reportDrain = 200 * time.Millisecond

// execHeartbeatFD is the command's heartbeat descriptor (ExtraFiles[1];
// fd 3 is execGuard's).
const execHeartbeatFD = 4

// readBeats turns every write on the heartbeat pipe into a heartbeat of the
// job, and every complete line into a report, until the pipe is closed.
// Once the command has exited, each read waits reportDrain at most: what
// is in the pipe is read at once, and children the command left holding
// it do not keep the reader.
func readBeats(ctx context.Context, r *os.File, rep *execReport, exited *atomic.Bool) {
	buf := make([]byte, 512)
	var line []byte
	long := false // the current line is too long to be a report
	for {
		if exited.Load() {
			r.SetReadDeadline(time.Now().Add(reportDrain))
		}
		n, err := r.Read(buf)
		if n > 0 {
			sidekiq.Heartbeat(ctx)
			data := buf[:n]
			for {
				i := bytes.IndexByte(data, '\n')
				if i < 0 {
					if long || len(line)+len(data) > maxReportLine {
						long, line = true, line[:0]
					} else {
						line = append(line, data...)
					}
					break
				}
				if !long && len(line)+i <= maxReportLine {
					line = append(line, data[:i]...)
					rep.line(ctx, line)
				}
				long, line = false, line[:0]
				data = data[i+1:]
			}
		}
		if err != nil {
			return
		}
	}
}

// limitEnv tells a command its limits: GOJOB_HEARTBEAT_TIMEOUT and
// GOJOB_TIMEOUT in seconds, as the payload gives them.
func limitEnv(job *wire.Job) []string {
	var env []string
	for _, kv := range [][2]string{{contract.KeyHeartbeatTimeout, "GOJOB_HEARTBEAT_TIMEOUT"}, {contract.KeyTimeout, "GOJOB_TIMEOUT"}} {
		v, _ := job.Get(kv[0])
		if _, ok := v.Float(); ok {
			env = append(env, kv[1]+"="+string(v.Encode()))
		}
	}
	return env
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimRight(string(b), "\r\n\t "), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return l
		}
	}
	return ""
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) Bytes() []byte { return t.buf }

// logWriter logs a command's stdout at debug level.
type logWriter struct {
	log zerolog.Logger
	jid string
}

func (w *logWriter) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.log.Debug().Str("jid", w.jid).Msg(l)
	}
	return len(p), nil
}

// httpHandler POSTs each job's payload JSON to URL, with X-Gojob-Jid,
// X-Gojob-Class and X-Gojob-Queue headers. A 2xx answer is success;
// anything else fails the job with the status and the start of the body,
// except the outcomes of docs/job-control.md: 429 or 503 with Retry-After
// snoozes the job, 410 discards it, and the header X-Gojob-Outcome
// (discard, snooze, retry_in; with Retry-After) says so explicitly. A 2xx
// JSON body with "result", "progress" or "message" goes to the job's
// status hash.
//
// With Heartbeats, the request also carries X-Gojob-Heartbeat-Url: a POST
// there is a heartbeat of the job (docs/heartbeats.md). The job's
// heartbeat_timeout and timeout, when set, are in X-Gojob-Heartbeat-Timeout
// and X-Gojob-Timeout (seconds).
type httpHandler struct {
	URL        string
	Client     *http.Client
	Heartbeats *heartbeatEndpoint
	// Pool receives the results; nil ignores them.
	Pool *redis.Pool
}

// httpError is the failure of an --http call.
type httpError struct {
	Status int
	Body   string
}

func (e *httpError) Error() string {
	if e.Body == "" {
		return fmt.Sprintf("HTTP %d", e.Status)
	}
	return fmt.Sprintf("HTTP %d: %s", e.Status, e.Body)
}

// ErrorClass names the failure for the Web UI.
func (e *httpError) ErrorClass() string { return "Gojob::HTTPError" }

// Perform posts the job.
func (h *httpHandler) Perform(ctx context.Context, job *wire.Job) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(job.Bytes()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Gojob-Jid", job.JID())
	req.Header.Set("X-Gojob-Class", job.Class())
	req.Header.Set("X-Gojob-Queue", job.Queue())
	if tp := tracing.Traceparent(ctx); tp != "" { // docs/tracing.md
		req.Header.Set("traceparent", tp)
	}
	for _, kv := range [][2]string{{contract.KeyHeartbeatTimeout, "X-Gojob-Heartbeat-Timeout"}, {contract.KeyTimeout, "X-Gojob-Timeout"}} {
		v, _ := job.Get(kv[0])
		if _, ok := v.Float(); ok {
			req.Header.Set(kv[1], string(v.Encode()))
		}
	}
	if h.Heartbeats != nil {
		url, done := h.Heartbeats.register(ctx)
		defer done()
		req.Header.Set("X-Gojob-Heartbeat-Url", url)
	}
	c := h.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	limit := int64(1024)
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	if ok && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		limit = maxReportLine
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, limit))
	rep := &execReport{pool: h.Pool, jid: job.JID()}
	if ok && limit > 1024 {
		rep.line(ctx, bytes.TrimSpace(body))
	}
	herr := &httpError{Status: resp.StatusCode, Body: lastLine(body)}
	var runErr error
	if !ok {
		runErr = herr
	}
	rep.out, rep.in = httpOutcome(resp)
	switch rep.out {
	case "discard":
		rep.outcome(runErr)
		return sidekiq.Discard(herr)
	case "retry_in":
		rep.outcome(runErr)
		return sidekiq.RetryIn(rep.in, herr)
	case "snooze":
		return rep.outcome(runErr)
	}
	rep.outcome(runErr)
	return runErr
}

// httpOutcome reads an answer's outcome (docs/job-control.md): the
// X-Gojob-Outcome header, else 429 or 503 with Retry-After (snooze), else
// 410 (discard); "" leaves it to the status code.
func httpOutcome(resp *http.Response) (string, time.Duration) {
	in := retryAfter(resp.Header.Get("Retry-After"))
	switch o := strings.ToLower(resp.Header.Get("X-Gojob-Outcome")); o {
	case "discard", "snooze", "retry_in":
		return o, in
	}
	switch {
	case (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) &&
		resp.Header.Get("Retry-After") != "":
		return "snooze", in
	case resp.StatusCode == http.StatusGone:
		return "discard", 0
	}
	return "", 0
}

// retryAfter reads a Retry-After value: seconds or an HTTP date.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseFloat(v, 64); err == nil && n > 0 && n < 1e9 {
		return time.Duration(n * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}
