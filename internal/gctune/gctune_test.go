package gctune

import (
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLimitFollowsTheLiveHeap(t *testing.T) {
	require.Equal(t, int64(HeapFloor), Limit(0, 0))
	require.Equal(t, int64(HeapFloor+5<<20), Limit(HeapFloor/LiveFactor, 5<<20))
	require.Equal(t, int64(LiveFactor*100<<20+5<<20), Limit(100<<20, 5<<20))
}

// Apply runs in a child process: it changes the collector of the process
// it runs in.
func TestApplySetsTheLimitAfterEachCollection(t *testing.T) {
	if os.Getenv("GCTUNE_CHILD") == "1" {
		Apply()
		if got := debug.SetGCPercent(-1); got != GCPercent {
			t.Fatalf("GOGC %d", got)
		}
		debug.SetGCPercent(GCPercent)
		keep := make([][]byte, 0, 64)
		for range 64 {
			keep = append(keep, make([]byte, 1<<20)) // 64 MB live
		}
		// The limit is set by a finalizer, after a collection, on the
		// finalizer goroutine: collect until it has run.
		limit := debug.SetMemoryLimit(-1)
		for i := 0; i < 10000 && limit < LiveFactor*(64<<20); i++ {
			runtime.GC()
			runtime.Gosched()
			limit = debug.SetMemoryLimit(-1)
		}
		if limit < LiveFactor*(64<<20) || limit > (LiveFactor+1)*(64<<20) {
			t.Fatalf("limit %d for a 64 MB live heap", limit)
		}
		runtime.KeepAlive(keep)
		return
	}
	for _, env := range [][]string{{"GCTUNE_CHILD=1"}, {"GCTUNE_CHILD=1", "GOGC=100"}} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestApplySetsTheLimitAfterEachCollection$", "-test.v")
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if len(env) == 1 {
			require.NoError(t, err, string(out))
			require.True(t, strings.Contains(string(out), "PASS"), string(out))
		} else {
			require.Error(t, err, "GOGC from the environment is kept: %s", out)
			require.Contains(t, string(out), "GOGC 100")
		}
	}
}
