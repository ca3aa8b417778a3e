package procstat

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestStartTimeTellsProcessesApart(t *testing.T) {
	self := StartTime(os.Getpid())
	if self == "" {
		t.Fatal("no start time for this process")
	}
	if self != StartTime(os.Getpid()) {
		t.Fatal("start time changes between reads")
	}
	cmd := exec.Command("sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if StartTime(pid) == "" {
		t.Fatal("no start time for a running child")
	}
	cmd.Process.Kill()
	cmd.Wait()
	if got := StartTime(pid); got != "" {
		t.Fatalf("start time %q for a process that has exited", got)
	}
	if BootID() == "" {
		t.Fatal("no boot id")
	}
}

// KillMarked kills the processes whose environment carries the marker,
// a process that left its session and process group included, and only
// those.
func TestKillMarkedFindsProcessesByTheirEnvironment(t *testing.T) {
	marker := "GOJOB_TEST_MARK=" + strconv.Itoa(os.Getpid())
	start := func(env ...string) *exec.Cmd {
		cmd := exec.Command("sleep", "300")
		cmd.Env = append(os.Environ(), env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	marked := start(marker)
	other := start(marker + "0") // a longer value is another marker
	done := make(chan struct{})
	go func() { marked.Wait(); close(done) }()
	require.Equal(t, 1, KillMarked(marker, 0))
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the marked process still runs")
	}
	require.NoError(t, other.Process.Signal(syscall.Signal(0)), "the other one runs")
}
