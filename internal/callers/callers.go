// Package callers formats a goroutine's stack as Ruby formats a
// backtrace, for the error_backtrace of jobs that panicked.
package callers

import (
	"fmt"
	"runtime"
	"strings"
)

// Stack returns the calling goroutine's frames as Ruby backtrace lines
// ("file:line:in `function'"), skipping skip frames (0 is runtime.Callers,
// 1 is Stack) and the runtime's own.
func Stack(skip int) []string {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(skip, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	var out []string
	for {
		f, more := frames.Next()
		if !strings.HasPrefix(f.Function, "runtime.") {
			out = append(out, fmt.Sprintf("%s:%d:in `%s'", f.File, f.Line, f.Function))
		}
		if !more {
			break
		}
	}
	return out
}
