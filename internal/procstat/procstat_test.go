package procstat

import (
	"os"
	"os/exec"
	"testing"
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
