package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
)

// tmuxSession runs a command in a detached tmux session of its own server
// (a socket in a temporary directory), 80x24, the pane kept after the
// command exits.
type tmuxSession struct {
	t    *testing.T
	sock string
}

func startTmux(t *testing.T, command ...string) *tmuxSession {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatalf("tmux is not installed (make test installs it): %v", err)
	}
	s := &tmuxSession{t: t, sock: filepath.Join(t.TempDir(), "tmux.sock")}
	t.Cleanup(func() { exec.Command("tmux", "-S", s.sock, "kill-server").Run() })
	// The server's options first, then the program.
	s.run("-f", "/dev/null", "new-session", "-d", "-s", "top", "-x", "80", "-y", "24", "sleep 600")
	s.run("set-option", "-g", "remain-on-exit", "on")
	s.run("respawn-pane", "-k", "-t", "top", strings.Join(command, " "))
	return s
}

func (s *tmuxSession) run(args ...string) string {
	s.t.Helper()
	cmd := exec.Command("tmux", append([]string{"-S", s.sock}, args...)...)
	cmd.Env = append(os.Environ(), "TERM=xterm-256color")
	out, err := cmd.CombinedOutput()
	require.NoError(s.t, err, "tmux %v: %s", args, out)
	return string(out)
}

func (s *tmuxSession) pane() string { return s.run("capture-pane", "-p", "-t", "top") }

// format reads a tmux format of the pane (#{alternate_on}, #{pane_dead}).
func (s *tmuxSession) format(f string) string {
	return strings.TrimSpace(s.run("display-message", "-p", "-t", "top", f))
}

// waitPane polls the pane until it contains text.
func (s *tmuxSession) waitPane(text string) time.Duration {
	s.t.Helper()
	start := time.Now()
	var last string
	for {
		if last = s.pane(); strings.Contains(last, text) {
			return time.Since(start)
		}
		if time.Since(start) > 30*time.Second {
			s.t.Fatalf("the pane did not show %q within 30s:\n%s", text, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The real `gojob top` in an 80x24 tmux pane shows a queue, pauses and
// unpauses it with p, shows a Redis outage without exiting, and q quits
// with the terminal restored (the alternate screen left, exit 0).
func TestTopInTmux(t *testing.T) {
	t.Parallel()
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	conn, err := srv.Dial()
	require.NoError(t, err)
	defer conn.Close()
	const queue = "tmux_visible_queue"
	_, errOut, code := gojobStdin(t, `{"class":"Waiting","queue":"`+queue+`"}`, "push", "-", "-r", srv.URL())
	require.Equal(t, 0, code, errOut)
	bin := gojobBinary(t)

	start := time.Now()
	// The shell in the pane writes gojob's exit status to a file: tmux
	// takes it only when it reaps the process, and tmux 3.3a sometimes
	// leaves a process that exited unreaped (a zombie) while its pane is
	// dead, with no status to read, for as long as one looks.
	status := filepath.Join(t.TempDir(), "status")
	s := startTmux(t, bin, "top", "-r", srv.URL(), ";", "echo", "$?", ">"+status)
	s.waitPane(queue)
	t.Logf("gojob top showed the queue %s after launch", time.Since(start).Round(time.Millisecond))
	require.Equal(t, "1", s.format("#{alternate_on}"), "the dashboard runs in the alternate screen")
	for _, l := range strings.Split(strings.TrimRight(s.pane(), "\n"), "\n") {
		require.LessOrEqual(t, len([]rune(l)), 80)
	}

	paused := func() bool {
		ok, err := redis.Bool(conn.Do("SISMEMBER", contract.KeyPausedQueues, queue))
		require.NoError(t, err)
		return ok
	}
	s.run("send-keys", "-t", "top", "p")
	wait.Within(t, 30*time.Second, "p to pause the queue", paused)
	s.waitPane("paused queue " + queue)
	s.run("send-keys", "-t", "top", "p")
	wait.Within(t, 30*time.Second, "p to unpause the queue", func() bool { return !paused() })

	// Redis goes away: the dashboard says so and keeps running.
	srv.Kill()
	s.waitPane("no answer from Redis")
	require.Equal(t, "0", s.format("#{pane_dead}"))

	s.run("send-keys", "-t", "top", "q")
	var exit []byte
	wait.Within(t, 30*time.Second, "q to quit", func() bool {
		exit, _ = os.ReadFile(status)
		return strings.HasSuffix(string(exit), "\n")
	})
	require.Equal(t, "0\n", string(exit), "gojob top's exit status; the pane:\n%s", s.pane())
	// tmux reads the pane's last output (leaving the alternate screen) in
	// its own time.
	wait.Within(t, 30*time.Second, "the terminal back from the alternate screen", func() bool {
		return s.format("#{alternate_on}") == "0"
	})
}

// Off a terminal `gojob top` prints one snapshot (text or JSON) and exits.
func TestTopOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	_, errOut, code := gojobStdin(t, `{"class":"A","queue":"once_q"}
{"class":"B","queue":"once_q"}`, "push", "-", "-r", srv.URL())
	require.Equal(t, 0, code, errOut)
	_, errOut, code = gojobStdin(t, "", "queue", "pause", "once_q", "-r", srv.URL())
	require.Equal(t, 0, code, errOut)

	out, errOut, code := gojobStdin(t, "", "top", "-r", srv.URL(), "--interval", "100ms")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^once_q +2 +\S+ +paused$`, out)
	require.Contains(t, out, "no live process")
	require.NotContains(t, out, "quit")

	out, errOut, code = gojobStdin(t, "", "top", "--json", "-r", srv.URL(), "--interval", "100ms")
	require.Equal(t, 0, code, errOut)
	var snap struct {
		Enqueued int64 `json:"enqueued"`
		Queues   []struct {
			Name    string   `json:"name"`
			Size    int64    `json:"size"`
			Latency *float64 `json:"latency"`
			Paused  bool     `json:"paused"`
		} `json:"queues"`
		Rates struct {
			Processed float64 `json:"processed_per_second"`
		} `json:"rates"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &snap), out)
	require.EqualValues(t, 2, snap.Enqueued)
	require.Len(t, snap.Queues, 1)
	require.Equal(t, "once_q", snap.Queues[0].Name)
	require.True(t, snap.Queues[0].Paused)
	require.NotNil(t, snap.Queues[0].Latency)

	_, errOut, code = gojobStdin(t, "", "top", "--once", "-r", "redis://127.0.0.1:1/0")
	require.Equal(t, exitUnreachable, code, errOut)
	_, errOut, code = gojobStdin(t, "", "top", "--interval", "1ms", "-r", srv.URL())
	require.Equal(t, exitUsage, code, errOut)
}
