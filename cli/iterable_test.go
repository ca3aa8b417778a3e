package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/wait"
)

// An iterable job stopped by SIGTERM mid-walk saves its cursor and goes
// back to its queue; another gojob process resumes it at that cursor: no
// item skipped, none run twice (the one in flight finished before the
// stop took effect).
func TestIterableJobResumesInAnotherProcessAfterSIGTERM(t *testing.T) {
	t.Parallel()
	e := newHBEnv(t)
	bin := buildTestBinary(t, "iterable-worker", "./testdata/iterable-worker")
	log := filepath.Join(e.dir, "log")
	const jid = "0123456789abcdef01234567"
	_, err := e.conn.Do("LPUSH", "queue:default", fmt.Sprintf(
		`{"retry":true,"queue":"default","args":[8,%q,3],"class":"IterJob","jid":%q,"created_at":1795886865.306,"enqueued_at":1795886865.306}`, log, jid))
	require.NoError(t, err)
	first := startBinary(t, bin, e.rs.URL())
	logLine(t, log, "waiting at 3")
	require.NoError(t, first.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, first.Wait())

	st, err := redis.StringMap(e.conn.Do("HGETALL", contract.IterationKey(jid)))
	require.NoError(t, err)
	require.Equal(t, "4", st["c"], "the cursor of the first item not run: %v", st)
	require.Equal(t, "1", st["ex"])
	queued, err := redis.Strings(e.conn.Do("LRANGE", "queue:default", 0, -1))
	require.NoError(t, err)
	require.Len(t, queued, 1)
	require.Contains(t, queued[0], jid)

	startBinary(t, bin, e.rs.URL())
	logLine(t, log, "item 7")
	wait.For(t, "the state removed", func() bool {
		n, _ := redis.Int(e.conn.Do("EXISTS", contract.IterationKey(jid)))
		return n == 0
	})
	b, err := os.ReadFile(log)
	require.NoError(t, err)
	var items []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.HasPrefix(line, "item ") {
			items = append(items, line)
		}
	}
	require.Equal(t, []string{"item 0", "item 1", "item 2", "item 3", "item 4", "item 5", "item 6", "item 7"}, items)
}
