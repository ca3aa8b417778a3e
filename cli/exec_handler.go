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
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/procstat"
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
// and GOJOB_TIMEOUT (seconds).
type execHandler struct {
	Command string
	Log     zerolog.Logger
}

// execError is the failure of an --exec command.
type execError struct {
	ExitCode int
	Message  string
}

func (e *execError) Error() string { return e.Message }

// ErrorClass names the failure for the Web UI.
func (e *execError) ErrorClass() string { return "Gojob::ExecError" }

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
	cmd.Cancel = func() error {
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
	go func() {
		defer close(beats)
		readBeats(ctx, beatR)
	}()
	if err == nil {
		err = cmd.Wait()
	}
	// Children the command left behind may hold the write end: closing
	// the read end ends the reader.
	beatR.Close()
	<-beats
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("command cancelled: %w", ctx.Err())
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

// execHeartbeatFD is the command's heartbeat descriptor (ExtraFiles[1];
// fd 3 is execGuard's).
const execHeartbeatFD = 4

// readBeats turns every write on the heartbeat pipe into a heartbeat of the
// job, until the pipe is closed.
func readBeats(ctx context.Context, r *os.File) {
	buf := make([]byte, 512)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			sidekiq.Heartbeat(ctx)
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
		if v, ok := job.Get(kv[0]); ok && v.IsNumber() {
			env = append(env, kv[1]+"="+v.NumberText())
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
// anything else fails the job with the status and the start of the body.
//
// With Heartbeats, the request also carries X-Gojob-Heartbeat-Url: a POST
// there is a heartbeat of the job (docs/heartbeats.md). The job's
// heartbeat_timeout and timeout, when set, are in X-Gojob-Heartbeat-Timeout
// and X-Gojob-Timeout (seconds).
type httpHandler struct {
	URL        string
	Client     *http.Client
	Heartbeats *heartbeatEndpoint
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
		if v, ok := job.Get(kv[0]); ok && v.IsNumber() {
			req.Header.Set(kv[1], v.NumberText())
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
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	return &httpError{Status: resp.StatusCode, Body: lastLine(body)}
}
