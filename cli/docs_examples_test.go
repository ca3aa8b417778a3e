package cli

import (
	"bufio"
	"fmt"
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

	"github.com/gojob/gojob/internal/pgtest"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/testlog"
	"github.com/gojob/gojob/internal/wait"
)

// exampleDocs are the documents whose shell examples must run as written:
// README.md and every page of docs/.
func exampleDocs(t *testing.T) []string {
	docs, err := filepath.Glob("../docs/*.md")
	require.NoError(t, err)
	return append([]string{"../README.md"}, docs...)
}

// docStatement is one gojob command of a fenced ```sh or ```console block.
type docStatement struct {
	line int
	cmd  string
	// exit is the expected exit code: 0, or N from a "# exit N" comment.
	exit int
}

// docBlock is a fenced shell block's gojob commands, run in one shell (so
// `bid=$(gojob batch create)` serves the lines after it).
type docBlock struct {
	file  string
	stmts []docStatement
}

// exampleSkip are the commands that cannot run as written, with the
// reason: "file:" and the start of the command.
var exampleSkip = map[string]string{
	"job-control.md:gojob cancel 2f5c1e0a9b8d7c6e5f4a3b21": "the jid of a job the reader runs (cli/job_control_test.go cancels real ones)",
	"job-control.md:gojob job 2f5c1e0a9b8d7c6e5f4a3b21":    "the jid of a job the reader runs (cli/job_control_test.go looks real ones up)",
	"sentinel.md:gojob work -r 'redis+sentinel://":         "needs the Sentinel deployment at the addresses shown (cli/sentinel_test.go runs one)",
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

var (
	exitComment = regexp.MustCompile(`#\s*exit (\d+)\b`)
	// runsGojob matches a statement that runs gojob: at its start, after
	// a pipe, ;, &&, $( or a loop's do.
	runsGojob = regexp.MustCompile(`(?:^|[;&|(]\s*|\$\(\s*|\bdo\s+)gojob\s`)
)

// docBlocks extracts the gojob commands of file's fenced sh, console, bash
// and shell blocks, with their `\` continuations joined and `$ ` prompts
// dropped; lines that run no gojob command (make, go run, comments) are
// left out.
func docBlocks(t *testing.T, file string) []docBlock {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	var out []docBlock
	var cur *docBlock
	sc := bufio.NewScanner(f)
	n := 0
	var pending string
	pendingLine := 0
	for sc.Scan() {
		n++
		trimmed := strings.TrimSpace(sc.Text())
		if fence, ok := strings.CutPrefix(trimmed, "```"); ok {
			if cur != nil {
				if len(cur.stmts) > 0 {
					out = append(out, *cur)
				}
				cur = nil
				continue
			}
			switch fence {
			case "sh", "console", "bash", "shell":
				cur = &docBlock{file: filepath.Base(file)}
			default:
				cur = &docBlock{} // another language: skipped
				cur.file = ""
			}
			continue
		}
		if cur == nil || cur.file == "" {
			continue
		}
		if pending == "" {
			pendingLine = n
			if strings.HasPrefix(trimmed, "#") || trimmed == "" {
				continue
			}
		}
		trimmed = strings.TrimPrefix(trimmed, "$ ")
		if strings.HasSuffix(trimmed, `\`) {
			pending += strings.TrimSuffix(trimmed, `\`) + " "
			continue
		}
		cmd := pending + trimmed
		pending = ""
		if !runsGojob.MatchString(cmd) {
			continue
		}
		st := docStatement{line: pendingLine, cmd: cmd}
		if m := exitComment.FindStringSubmatch(cmd); m != nil {
			st.exit, _ = strconv.Atoi(m[1])
		}
		cur.stmts = append(cur.stmts, st)
	}
	require.NoError(t, sc.Err())
	return out
}

// Every gojob command of README.md and docs/*.md runs as written with the
// real binary on a fresh private Redis, in document order (one Redis and
// one working directory per document): one that finishes exits 0 (or the
// "# exit N" its comment names); one that serves (work, web) comes up,
// logs no error and stops cleanly on SIGTERM. The addresses are the
// test's: redis://127.0.0.1:6379/0 and REDIS_URL are the private Redis,
// the PostgreSQL URLs (postgres://app@db1/app, …@db2/app) two fresh
// databases of the local server, /var/lib/gojob a directory of the test,
// and the dashboard listens on a free port instead of 9292; config/
// schedule.yml holds a sidekiq-cron schedule. Only the commands of
// exampleSkip are not run, for the reason given there.
func TestDocExamplesRunAsWritten(t *testing.T) {
	t.Parallel()
	bin := gojobBinary(t)
	for _, doc := range exampleDocs(t) {
		blocks := docBlocks(t, doc)
		if len(blocks) == 0 {
			continue
		}
		t.Run(filepath.Base(doc), func(t *testing.T) {
			srv := redistest.StartWith(t, redistest.Options{TCP: true})
			dir := t.TempDir()
			require.NoError(t, os.MkdirAll(filepath.Join(dir, "config"), 0o755))
			require.NoError(t, os.MkdirAll(filepath.Join(dir, "var-lib-gojob"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "config", "schedule.yml"), []byte(
				"nightly_report:\n  cron: \"0 3 * * *\"\n  class: ReportJob\n  queue: reports\n  args: [\"daily\"]\n"), 0o644))
			subst := []string{defaultRedisURL, srv.URL(), "/var/lib/gojob/", filepath.Join(dir, "var-lib-gojob") + "/",
				"0.0.0.0:9292", "127.0.0.1:0"}
			if docNeedsPostgres(blocks) {
				urls, drop, err := pgtest.Create("gojob_cli_docs", 2)
				require.NoError(t, err)
				t.Cleanup(drop)
				subst = append(subst, "postgres://app@db1/app", urls[0], "postgres://app@db2/app", urls[1], "postgres://…/app", urls[0])
			}
			env := append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"),
				"REDIS_URL="+srv.URL(), "DATABASE_URL=", "DURABLE_JOB_SERVER_URLS=", "DURABLE_JOB_SERVER_ENV_VARS=", "HOME="+dir)
			replacer := strings.NewReplacer(subst...)
			for _, b := range blocks {
				runDocBlock(t, b, replacer, dir, env)
			}
		})
	}
}

func docNeedsPostgres(blocks []docBlock) bool {
	for _, b := range blocks {
		for _, s := range b.stmts {
			if strings.Contains(s.cmd, "postgres://") {
				return true
			}
		}
	}
	return false
}

// runDocBlock runs a block's commands in one shell, each followed by a line
// with its exit code; a serving command runs on its own (runServing).
func runDocBlock(t *testing.T, b docBlock, r *strings.Replacer, dir string, env []string) {
	t.Helper()
	var script strings.Builder
	var batch []docStatement
	flush := func() {
		if len(batch) == 0 {
			return
		}
		c := exec.Command("sh", "-c", script.String())
		c.Dir, c.Env = dir, env
		out, _ := c.CombinedOutput()
		codes := map[int]int{}
		for _, m := range regexp.MustCompile(`(?m)^@@rc (\d+) (\d+)$`).FindAllStringSubmatch(string(out), -1) {
			line, _ := strconv.Atoi(m[1])
			codes[line], _ = strconv.Atoi(m[2])
		}
		for _, st := range batch {
			code, ok := codes[st.line]
			require.True(t, ok, "%s:%d: %s did not run\n%s", b.file, st.line, st.cmd, out)
			require.Equal(t, st.exit, code, "%s:%d: %s\n%s", b.file, st.line, st.cmd, out)
			t.Logf("%s:%d: %s: exit %d", b.file, st.line, st.cmd, code)
		}
		script.Reset()
		batch = nil
	}
	for _, st := range b.stmts {
		name := fmt.Sprintf("%s:%d", b.file, st.line)
		if reason := skipReason(b.file, st.cmd); reason != "" {
			t.Logf("%s: not run (%s): %s", name, reason, st.cmd)
			continue
		}
		cmd := r.Replace(st.cmd)
		ready := ""
		for _, l := range longRunning {
			if strings.HasPrefix(cmd, l.prefix) {
				ready = l.ready
				break
			}
		}
		if ready != "" {
			flush()
			if strings.HasPrefix(cmd, "gojob web ") && !strings.Contains(cmd, "--addr") {
				cmd = "gojob web --addr 127.0.0.1:0 " + strings.TrimPrefix(cmd, "gojob web ")
			}
			runServing(t, name, cmd, ready, dir, env)
			continue
		}
		fmt.Fprintf(&script, "%s\necho \"@@rc %d $?\"\n", cmd, st.line)
		batch = append(batch, st)
	}
	flush()
}

func skipReason(file, cmd string) string {
	for key, reason := range exampleSkip {
		f, prefix, _ := strings.Cut(key, ":")
		if f == file && strings.HasPrefix(cmd, prefix) {
			return reason
		}
	}
	return ""
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
