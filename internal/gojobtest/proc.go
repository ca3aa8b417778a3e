package gojobtest

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gojob/gojob/internal/testlog"
	"github.com/gojob/gojob/internal/wait"
)

// Proc is a command a test started with Start: a `gojob work` process, or
// another program built for the test.
type Proc struct {
	Cmd  *exec.Cmd
	Logs *testlog.Buffer // its standard output and error
	done chan struct{}   // closed when it has exited
	err  error           // its exit, once done
}

// Start runs bin with args. The process is killed at the end of the test,
// and its output is logged when the test failed.
func Start(t testing.TB, bin string, args ...string) *Proc {
	t.Helper()
	return StartCmd(t, exec.Command(bin, args...))
}

// StartCmd is Start of a command the test has prepared (its environment,
// for one); its output goes to Logs.
func StartCmd(t testing.TB, cmd *exec.Cmd) *Proc {
	t.Helper()
	p := &Proc{Cmd: cmd, Logs: testlog.New(nil), done: make(chan struct{})}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Logs, p.Logs
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	go func() { p.err = p.Cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s (pid %d) log:\n%s", strings.Join(p.Cmd.Args, " "), p.Cmd.Process.Pid, p.Logs.String())
		}
	})
	return p
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait waits for the process to exit and returns how it did.
func (p *Proc) Wait() error {
	<-p.done
	return p.err
}

var identityRE = regexp.MustCompile(`identity=(\S+)`)

// Identity waits for the process identity that `gojob work` logs when it
// starts (a minute at most: a loaded machine may start it slowly), and
// returns it.
func (p *Proc) Identity(t testing.TB) string {
	t.Helper()
	var id string
	wait.Within(t, time.Minute, "gojob work to log its identity", func() bool {
		if m := identityRE.FindStringSubmatch(p.Logs.String()); m != nil {
			id = m[1]
		}
		return id != ""
	})
	return id
}

// Lines returns the non-empty lines of a file a process writes, trimmed;
// none while the file does not exist.
func Lines(t testing.TB, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
