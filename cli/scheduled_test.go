package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
)

// The reproduction: a due scheduled member that parses but fails
// the client's validation (args is a hash) goes to the dead set unchanged;
// a valid job due 5 s later still runs; the log never calls it a Redis
// outage; SIGTERM stops the process at once with status 0.
func TestInvalidScheduledJobDoesNotBlockThePoller(t *testing.T) {
	t.Parallel()
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	conn := rs.Pool(t).Get()
	defer conn.Close()
	now := time.Now()
	invalid := `{"class":"Good","args":{"a":1},"jid":"aaaaaaaaaaaaaaaaaaaaaaaa","queue":"default"}`
	valid := `{"class":"Good","args":[1],"jid":"bbbbbbbbbbbbbbbbbbbbbbbb","queue":"default","retry":true}`
	_, err := conn.Do("ZADD", "schedule", contract.Score(now.Add(-10*time.Second)), invalid, contract.Score(now.Add(5*time.Second)), valid)
	require.NoError(t, err)
	runs := newRunLog(t)
	// The poller's first pass comes 10-15 s after start, as in Ruby.
	w := startWorker(t, rs.URL(), "-c", "2", "--exec", runs.execArg("Good"))
	wait.Within(t, 40*time.Second, "the valid job to run", func() bool { return runs.counts(t)["bbbbbbbbbbbbbbbbbbbbbbbb"] == 1 })
	dead, err := redis.Strings(conn.Do("ZRANGE", "dead", 0, -1))
	require.NoError(t, err)
	require.Equal(t, []string{invalid}, dead)
	stopped := time.Now()
	require.NoError(t, w.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, w.Wait(), w.Logs.String())
	require.Less(t, time.Since(stopped), 5*time.Second)
	require.Zero(t, w.Logs.Count("", "redis unavailable"), w.Logs.String())
	require.Equal(t, 1, w.Logs.Count("", "cannot be pushed"), w.Logs.String())
}

// gojob scheduled and gojob retries list the next due first even when the
// set holds more than --limit entries (the Web UI's order); dead lists the
// newest first.
func TestScheduledAndRetriesListTheNextDueFirst(t *testing.T) {
	// Not parallel: see the note on runCLI.
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	conn := rs.Pool(t).Get()
	defer conn.Close()
	now := time.Now()
	for _, set := range []string{"schedule", "retry", "dead"} {
		for i := 1; i <= 30; i++ {
			// Added in a shuffled order; due i minutes from now.
			n := (i*7)%30 + 1
			job := fmt.Sprintf(`{"class":"Job%d","args":[],"jid":"%s%022d","queue":"default","retry":true}`, n, set[:2], n)
			_, err := conn.Do("ZADD", set, contract.Score(now.Add(time.Duration(n)*time.Minute)), job)
			require.NoError(t, err)
		}
	}
	for cmd, want := range map[string][]string{
		"scheduled": {"Job1", "Job2", "Job3", "Job4", "Job5"},
		"retries":   {"Job1", "Job2", "Job3", "Job4", "Job5"},
		"dead":      {"Job30", "Job29", "Job28", "Job27", "Job26"},
	} {
		out, errOut, code := runCLI(t, cmd, "-r", rs.URL(), "--limit", "5", "--json")
		require.Equal(t, 0, code, errOut)
		var page struct {
			Size    int `json:"size"`
			Entries []struct {
				Class string `json:"class"`
			} `json:"entries"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &page))
		require.Equal(t, 30, page.Size)
		var got []string
		for _, e := range page.Entries {
			got = append(got, e.Class)
		}
		require.Equal(t, want, got, cmd)

		out, _, code = runCLI(t, cmd, "-r", rs.URL(), "--limit", "5", "--offset", "5")
		require.Equal(t, 0, code)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 7, out) // "<set>: 30", the header, 5 entries
		if cmd != "dead" {
			require.Contains(t, lines[2], " Job6 ", cmd)
		} else {
			require.Contains(t, lines[2], " Job25 ", cmd)
		}
	}
}
