package cli

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/testlog"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/wire"
)

// fillWithHistory gives a Redis what a long-lived Ruby cluster leaves:
// Sidekiq 7.x and 8.x metrics keys for each of the last 480 minutes, the
// newest retry and dead entries, and thousands of unrelated keys.
func fillWithHistory(t *testing.T, conn redis.Conn) {
	t.Helper()
	now := time.Now()
	for m := range 480 {
		at := now.Add(-time.Duration(m) * time.Minute)
		k7, _ := contract.MetricsKeys(wire.Version7, at)
		k8, _ := contract.MetricsKeys(wire.Version8, at)
		conn.Send("HSET", k7[0], "HardJob|p", 1)
		conn.Send("HSET", k8[len(k8)-1], "HardJob|p", 1)
	}
	for i := range 20 {
		entry := fmt.Sprintf(`{"class":"HardJob","args":[],"jid":"old%d","queue":"default","retry":true,"error_class":"RuntimeError","error_message":"x","failed_at":1795296573.0,"retry_count":1}`, i)
		conn.Send("ZADD", contract.KeyRetry, 1795296573+i, entry)
		conn.Send("ZADD", contract.KeyDead, 1795296573+i, entry)
	}
	for i := range 20000 {
		conn.Send("SET", fmt.Sprintf("cache:%d", i), "x")
	}
	_, err := conn.Do("")
	require.NoError(t, err)
}

// A push is a handful of commands whatever Redis holds: the version
// decision reads Ruby's evidence in two round trips, not a command per
// minute of history.
func TestPushSendsFewCommandsWhateverRedisHolds(t *testing.T) {
	t.Parallel()
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	conn := rs.Pool(t).Get()
	t.Cleanup(func() { conn.Close() })
	fillWithHistory(t, conn)
	mon := rs.StartMonitor(t)
	out, err := exec.Command(gojobBinary(t), "push", "-r", rs.URL(), "Foo", "1").CombinedOutput()
	require.NoError(t, err, string(out))
	lines := mon.ClientLines(t)
	require.LessOrEqual(t, len(lines), 10, strings.Join(lines, "\n"))
	require.Contains(t, redistest.Names(lines), "lpush")
}

// gojob work's start-up sends the same commands on an empty Redis and on
// one with 8 hours of Ruby history and 20,000 other keys: no SCAN, no
// command per key or per minute.
func TestWorkStartupDoesNotGrowWithHistory(t *testing.T) {
	t.Parallel()
	startup := func(fill bool) []string {
		rs := redistest.StartWith(t, redistest.Options{TCP: true})
		conn := rs.Pool(t).Get()
		t.Cleanup(func() { conn.Close() })
		if fill {
			fillWithHistory(t, conn)
		}
		mon := rs.StartMonitor(t)
		logs := testlog.New(nil)
		cmd := exec.Command(gojobBinary(t), "work", "-r", rs.URL(), "-q", "startup")
		cmd.Stdout, cmd.Stderr = logs, logs
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		// Up to the last of the start-up's steps, which run on goroutines
		// of their own and so in any order: the first heartbeat, the
		// reliable fetch's first read of the in-progress lists' registry
		// (after its probe and its scripts) and job control's
		// subscription. Whatever comes after one of them and before
		// another would otherwise be counted in one run and not the other.
		var lines []string
		has := func(prefix string) bool {
			return slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, prefix) })
		}
		wait.For(t, "the first heartbeat, the fetch's first recovery read and the cancel subscription", func() bool {
			lines = append(lines, mon.ClientLines(t)...)
			return has(`"SADD" "processes"`) && has(`"SMEMBERS" "gojob-working-lists"`) && has(`"SUBSCRIBE" "gojob-cancel"`)
		})
		// Less what each connection and slot does as it starts (the
		// master's run_id on each new connection, an idle slot's first
		// wait), whose number depends on timing.
		var out []string
		for _, l := range lines {
			if strings.HasPrefix(l, `"SCARD" "processes"`) || strings.Contains(l, "queue:startup") ||
				strings.Contains(l, "reliable-fetcher-heartbeat-") || strings.Contains(l, `"gojob-paused-queues"`) ||
				strings.HasPrefix(l, `"INFO" "server"`) {
				continue
			}
			out = append(out, l)
		}
		return out
	}
	empty, full := startup(false), startup(true)
	for _, lines := range [][]string{empty, full} {
		names := redistest.Names(lines)
		require.NotContains(t, names, "scan", lines)
		require.NotContains(t, names, "keys", lines)
	}
	require.LessOrEqual(t, len(full), len(empty)+2, "empty:\n%s\nfull:\n%s", strings.Join(empty, "\n"), strings.Join(full, "\n"))
	t.Logf("start-up commands: %d on an empty Redis, %d with history", len(empty), len(full))
}
