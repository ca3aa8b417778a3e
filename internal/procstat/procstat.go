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
