package procstat

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// KillMarked sends SIGKILL to every process whose environment holds the
// variable marker ("NAME=value") and that is neither this process nor in
// process group skipGroup (0: none), and returns how many it killed. It
// looks again until a look finds none (a process may fork while it looks),
// at most a few times. A process that cleared its environment, or whose
// environment this user may not read, is not found.
func KillMarked(marker string, skipGroup int) int {
	want := []byte(marker)
	self := os.Getpid()
	// A process killed in one look may still be dying (its environment
	// readable) in the next: it is counted once.
	seen := map[int]bool{}
	for range 5 {
		found := 0
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return len(seen)
		}
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self || seen[pid] {
				continue
			}
			env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
			if err != nil || !hasVar(env, want) {
				continue
			}
			if skipGroup != 0 {
				if g, err := syscall.Getpgid(pid); err == nil && g == skipGroup {
					continue
				}
			}
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				seen[pid] = true
				found++
			}
		}
		if found == 0 {
			break
		}
	}
	return len(seen)
}

// hasVar reports whether the NUL-separated environment env holds the
// entry want ("NAME=value") whole.
func hasVar(env, want []byte) bool {
	for len(env) > 0 {
		entry, rest, _ := bytes.Cut(env, []byte{0})
		if bytes.Equal(entry, want) {
			return true
		}
		env = rest
	}
	return false
}
