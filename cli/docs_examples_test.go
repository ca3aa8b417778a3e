package cli

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/testlog"
	"github.com/gojob/gojob/internal/wait"
)

// exampleDocs are the documents whose shell examples must run as written.
var exampleDocs = []string{"../README.md", "../docs/cli.md"}

// docExample is one command of a fenced ```sh or ```console block.
type docExample struct {
	file string
	line int
	cmd  string
	// exit is the expected exit code: 0, or N from a trailing "# exit N".
	exit int
}

// longRunning are the commands that serve until stopped, with the log line
// that says they are up: the test waits for it, sends SIGTERM and expects
// a clean exit (0) with no error logged.
var longRunning = []struct{ prefix, ready string }{
	{"gojob ordered work ", "ordered worker started"},
	{"gojob work ", "gojob started"},
	{"gojob web ", "dashboard: http"},
	{"gojob dev ", "listening on"},
}

var exitComment = regexp.MustCompile(`#\s*exit (\d+)\b`)

// docExamples extracts the commands of the fenced sh, console, bash and
// shell blocks of file that run gojob: lines that start with `gojob ` or
// `$ gojob`, or pipe into gojob, with their `\` continuations joined.
func docExamples(t *testing.T, file string) []docExample {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	var out []docExample
	sc := bufio.NewScanner(f)
	n, inBlock, shell := 0, false, false
	var pending string
	pendingLine := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			if inBlock {
				inBlock = false
				continue
			}
			inBlock = true
			switch strings.TrimPrefix(trimmed, "```") {
			case "sh", "console", "bash", "shell":
				shell = true
			default:
				shell = false
			}
			continue
		}
		if !inBlock || !shell {
			continue
		}
		if pending == "" {
			pendingLine = n
		}
		trimmed = strings.TrimPrefix(trimmed, "$ ")
		if strings.HasSuffix(trimmed, `\`) {
			pending += strings.TrimSuffix(trimmed, `\`) + " "
			continue
		}
		cmd := pending + trimmed
		pending = ""
		if !strings.HasPrefix(cmd, "gojob ") && !strings.Contains(cmd, "| gojob ") {
			continue
		}
		ex := docExample{file: filepath.Base(file), line: pendingLine, cmd: cmd}
		if m := exitComment.FindStringSubmatch(cmd); m != nil {
			ex.exit, _ = strconv.Atoi(m[1])
		}
		out = append(out, ex)
	}
	require.NoError(t, sc.Err())
	return out
}

// Every gojob command of README.md and docs/cli.md runs as written with the
// real binary on a fresh private Redis, in document order (one Redis per
// document): one that finishes exits 0 (or the "# exit N" its comment
// names); one that serves (work, web) comes up, logs no error and stops
// cleanly on SIGTERM. The examples' redis://127.0.0.1:6379/0 and REDIS_URL
// are the private Redis, so no test reaches a Redis it did not start.
func TestDocExamplesRunAsWritten(t *testing.T) {
	t.Parallel()
	bin := gojobBinary(t)
	for _, doc := range exampleDocs {
		t.Run(filepath.Base(doc), func(t *testing.T) {
			examples := docExamples(t, doc)
			require.NotEmpty(t, examples, "%s has shell examples", doc)
			srv := redistest.StartWith(t, redistest.Options{TCP: true})
			dir := t.TempDir()
			env := append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"),
				"REDIS_URL="+srv.URL(), "DATABASE_URL=", "DURABLE_JOB_SERVER_URLS=", "HOME="+dir)
			for _, ex := range examples {
				name := ex.file + ":" + strconv.Itoa(ex.line)
				cmdline := strings.ReplaceAll(ex.cmd, defaultRedisURL, srv.URL())
				ready := ""
				for _, l := range longRunning {
					if strings.HasPrefix(ex.cmd, l.prefix) {
						ready = l.ready
						break
					}
				}
				if ready != "" {
					runServing(t, name, cmdline, ready, dir, env)
					continue
				}
				c := exec.Command("sh", "-c", cmdline)
				c.Dir, c.Env = dir, env
				c.Stdin = nil
				out, err := c.CombinedOutput()
				code := 0
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					code = ee.ExitCode()
				} else {
					require.NoError(t, err, name)
				}
				require.Equal(t, ex.exit, code, "%s: %s\n%s", name, ex.cmd, out)
				t.Logf("%s: %s: exit %d", name, ex.cmd, code)
			}
		})
	}
}

// runServing starts a long-running example, waits for its ready line,
// stops it with SIGTERM and requires a clean exit with no error logged.
func runServing(t *testing.T, name, cmdline, ready, dir string, env []string) {
	t.Helper()
	logs := testlog.New(nil)
	c := exec.Command("sh", "-c", "exec "+cmdline)
	c.Dir, c.Env = dir, env
	c.Stdout, c.Stderr = logs, logs
	require.NoError(t, c.Start(), name)
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			c.Process.Kill()
			<-done
		}
	})
	wait.Within(t, 30*time.Second, name+" to log "+strconv.Quote(ready), func() bool {
		select {
		case err := <-done:
			stopped = true
			t.Fatalf("%s: %s exited before it was up: %v\n%s", name, cmdline, err, logs.String())
		default:
		}
		return strings.Contains(logs.String(), ready)
	})
	require.NoError(t, c.Process.Signal(syscall.SIGTERM))
	err := <-done
	stopped = true
	require.NoError(t, err, "%s: %s on SIGTERM\n%s", name, cmdline, logs.String())
	require.NotRegexp(t, `(?m) (ERR|FTL) `, logs.String(), "%s: %s logged an error", name, cmdline)
	t.Logf("%s: %s: up, stopped cleanly", name, cmdline)
}
