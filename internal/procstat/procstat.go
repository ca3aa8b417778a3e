// Package procstat reads this process's memory figures from
// /proc/self/status (Linux).
package procstat

import (
	"os"
	"strconv"
	"strings"
)

// KB returns a "<field>: N kB" value of /proc/self/status, such as VmRSS
// (resident now) or VmHWM (peak resident), or 0 when it is unavailable.
func KB(field string) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// BootID returns this machine's boot id (/proc/sys/kernel/random/boot_id),
// which differs between machines and between boots, or "" when unknown.
func BootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// StartTime returns when process pid started, in clock ticks after boot
// (field 22 of /proc/<pid>/stat), or "" when there is no such process. A
// pid reused by another process has another start time.
func StartTime(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields after it start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19] // field 22: the third field after the state (field 3)
}

// Syscalls returns how many read and write system calls process pid (0:
// this one) has made, from /proc/<pid>/io; ok is false where that file
// cannot be read (another user's process, not Linux).
func Syscalls(pid int) (n int64, ok bool) {
	path := "/proc/self/io"
	if pid != 0 {
		path = "/proc/" + strconv.Itoa(pid) + "/io"
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, found := strings.Cut(line, ":")
		if found && (k == "syscr" || k == "syscw") {
			x, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, false
			}
			n += x
		}
	}
	return n, true
}

// PIDKB is KB for process pid (0: this one).
func PIDKB(pid int, field string) int64 {
	path := "/proc/self/status"
	if pid != 0 {
		path = "/proc/" + strconv.Itoa(pid) + "/status"
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// CPU returns the CPU time process pid has used so far, in nanoseconds
// from the scheduler's per-thread accounting (/proc/<pid>/task/*/schedstat),
// which is exact where /proc/<pid>/stat counts 10 ms ticks. A thread that
// has exited drops out of that sum; the Go runtime keeps its threads, so
// for a Go process the sum is the process's. ok is false when the
// process's tasks cannot be read.
func CPU(pid int) (ns int64, ok bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, false
	}
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			continue // the thread exited meanwhile
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, false
		}
		ns += v
	}
	return ns, true
}
