package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
)

// Three gojob work processes with --limit Limited=3 (and 4 slots each)
// never run a fourth Limited job at once, and run them all.
func TestLimitFlagHoldsAcrossThreeProcesses(t *testing.T) {
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := rs.Pool(t)
	dir := t.TempDir()
	running := filepath.Join(dir, "running")
	require.NoError(t, os.Mkdir(running, 0o755))
	seen := filepath.Join(dir, "seen")
	script := filepath.Join(dir, "job.sh")
	require.NoError(t, os.WriteFile(script, []byte(fmt.Sprintf(`#!/bin/sh
touch %[1]s/$GOJOB_JID
ls %[1]s | wc -l >> %[2]s
sleep 0.1
rm %[1]s/$GOJOB_JID
`, running, seen)), 0o755))
	for range 3 {
		startWorker(t, rs.URL(), "-c", "4", "--exec", "Limited="+script, "--limit", "Limited=3", "--limit-wait", "60s")
	}
	pushJobs(t, pool, "Limited", "lim", 45)
	wait.Within(t, 60*time.Second, "every job", func() bool {
		b, _ := os.ReadFile(seen)
		return strings.Count(string(b), "\n") == 45
	})
	b, err := os.ReadFile(seen)
	require.NoError(t, err)
	peak := 0
	for _, line := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(line)
		require.NoError(t, err)
		peak = max(peak, n)
	}
	require.LessOrEqual(t, peak, 3, "never four at once")
	require.GreaterOrEqual(t, peak, 2, "the limit, not one process, set the pace")
	_, errOut, rc := runCLI(t, "work", "-r", rs.URL(), "--limit", "Limited")
	require.Equal(t, 2, rc)
	require.Contains(t, errOut, "want CLASS=N")
}
