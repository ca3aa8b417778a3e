package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/testlog"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// runCLI runs the in-process CLI. Tests that do so are not parallel:
// urfave/cli v2 applies its package-level HelpFlag in every App, so two Apps
// parsing at once race (a library limitation; one binary runs one App).
func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	out, errb := testlog.New(nil), testlog.New(nil)
	code := Run(context.Background(), append([]string{"gojob"}, args...), out, errb)
	return out.String(), errb.String(), code
}

func TestWorkExecAndHTTPHandlers(t *testing.T) {
	// Not parallel: see the note on runCLI.
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := srv.Pool(t)
	dir := t.TempDir()
	seen := filepath.Join(dir, "seen")
	script := filepath.Join(dir, "job.sh")
	require.NoError(t, os.WriteFile(script, []byte(`#!/bin/sh
payload=$(cat)
echo "$GOJOB_JID $GOJOB_CLASS $GOJOB_QUEUE $payload" >> `+seen+`
if [ "$GOJOB_CLASS" = "FailJob" ]; then echo "some noise" >&2; echo "disk full on /dev/sda1" >&2; exit 3; fi
`), 0o755))
	var httpMu sync.Mutex
	var httpBodies []string
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		httpMu.Lock()
		httpBodies = append(httpBodies, r.Header.Get("X-Gojob-Jid")+" "+string(b))
		httpMu.Unlock()
		if strings.Contains(string(b), "HookFail") {
			http.Error(w, "upstream exploded", http.StatusBadGateway)
		}
	}))
	defer web.Close()

	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool})
	require.NoError(t, err)
	ctx := context.Background()
	ok, err := client.Enqueue(ctx, "", "ShellJob", 1, "é")
	require.NoError(t, err)
	_, err = client.Enqueue(ctx, "", "FailJob")
	require.NoError(t, err)
	hook, err := client.Enqueue(ctx, "", "Hook", "x")
	require.NoError(t, err)
	_, err = client.Enqueue(ctx, "", "HookFail")
	require.NoError(t, err)

	wctx, cancel := context.WithCancel(ctx)
	errb := testlog.New(nil)
	done := make(chan int)
	go func() {
		done <- Run(wctx, []string{"gojob", "work", "-r", srv.URL(), "-c", "2", "--sidekiq-version", "6",
			"--exec", "ShellJob=" + script, "--exec", "FailJob=" + script,
			"--http", "Hook=" + web.URL, "--http", "HookFail=" + web.URL}, io.Discard, errb)
	}()
	conn := pool.Get()
	defer conn.Close()
	wait.Within(t, 20*time.Second, "two retry entries", func() bool {
		n, _ := redis.Int(conn.Do("ZCARD", "retry"))
		return n == 2
	})
	cancel()
	require.Equal(t, 0, <-done, errb.String())

	data, err := os.ReadFile(seen)
	require.NoError(t, err)
	require.Contains(t, string(data), ok.JID+" ShellJob default "+string(ok.Payload))
	entries, err := redis.Strings(conn.Do("ZRANGE", "retry", 0, -1))
	require.NoError(t, err)
	var messages []string
	for _, e := range entries {
		j, err := wire.ParseJob([]byte(e))
		require.NoError(t, err)
		messages = append(messages, j.ErrorClass()+": "+j.ErrorMessage())
	}
	require.ElementsMatch(t, []string{"Gojob::ExecError: disk full on /dev/sda1", "Gojob::HTTPError: HTTP 502: upstream exploded"}, messages)
	httpMu.Lock()
	require.Contains(t, strings.Join(httpBodies, "\n"), hook.JID+" "+string(hook.Payload))
	httpMu.Unlock()
	// The process left the registry at shutdown.
	n, _ := redis.Int(conn.Do("SCARD", "processes"))
	require.Zero(t, n)
}

func TestAdminCommands(t *testing.T) {
	// Not parallel: see the note on runCLI.
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	url := srv.URL()
	out, errOut, code := runCLI(t, "push", "-r", url, "--retry", "2", "HardJob", "1", `{"a":[1.5]}`, "plain text")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "pushed ")
	out, _, code = runCLI(t, "push", "-r", url, "--json", "--in", "1h", "Later")
	require.Equal(t, 0, code)
	var pushed struct {
		JID       string          `json:"jid"`
		Scheduled bool            `json:"scheduled"`
		Payload   json.RawMessage `json:"payload"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &pushed))
	require.True(t, pushed.Scheduled)

	out, _, code = runCLI(t, "stats", "-r", url, "--json")
	require.Equal(t, 0, code)
	var st map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.EqualValues(t, 1, st["enqueued"])
	require.EqualValues(t, 1, st["scheduled"])

	out, _, code = runCLI(t, "queues", "-r", url)
	require.Equal(t, 0, code)
	require.Contains(t, out, "default")

	out, _, code = runCLI(t, "scheduled", "-r", url)
	require.Equal(t, 0, code)
	require.Contains(t, out, pushed.JID)

	_, _, code = runCLI(t, "kill", "-r", url, pushed.JID)
	require.Equal(t, 0, code)
	out, _, code = runCLI(t, "dead", "-r", url, "--json")
	require.Equal(t, 0, code)
	require.Contains(t, out, pushed.JID)
	_, _, code = runCLI(t, "retry", "-r", url, pushed.JID)
	require.Equal(t, 0, code)
	out, _, _ = runCLI(t, "queues", "-r", url, "--json")
	require.Contains(t, out, `"size": 2`)
	_, errOut, code = runCLI(t, "delete", "-r", url, "no-such-jid")
	require.Equal(t, 4, code)
	require.Contains(t, errOut, "no job no-such-jid")
	_, errOut, code = runCLI(t, "quiet", "-r", url)
	require.Equal(t, 2, code, errOut)
	out, _, code = runCLI(t, "processes", "-r", url)
	require.Equal(t, 0, code)
	require.Contains(t, out, "no live processes")
}

func TestDevStartsEmbeddedRedis(t *testing.T) {
	// Not parallel: see the note on runCLI.
	ctx, cancel := context.WithCancel(context.Background())
	out := testlog.New(nil)
	done := make(chan int)
	go func() {
		done <- Run(ctx, []string{"gojob", "dev", "--addr", "127.0.0.1:0", "--log-level", "warn"}, out, io.Discard)
	}()
	var url string
	wait.Within(t, 20*time.Second, "dev to print its URL", func() bool {
		for _, f := range strings.Fields(out.String()) {
			if strings.HasPrefix(f, "redis://") {
				url = f
				return true
			}
		}
		return false
	})
	pool, err := sidekiq.NewPool(url)
	require.NoError(t, err)
	defer pool.Close()
	conn := pool.Get()
	defer conn.Close()
	wait.Within(t, 20*time.Second, "demo jobs to run", func() bool {
		n, _ := redis.Int(conn.Do("LLEN", "queue:default"))
		procs, _ := redis.Int(conn.Do("SCARD", "processes"))
		sched, _ := redis.Int(conn.Do("ZCARD", "schedule"))
		return n == 0 && procs == 1 && sched == 1
	})
	cancel()
	require.Equal(t, 0, <-done)
}

func TestUsageErrors(t *testing.T) {
	// Not parallel: see the note on runCLI.
	_, errOut, code := runCLI(t, "work", "-r", "redis://127.0.0.1:1/0", "-q", ",3")
	require.Equal(t, 2, code, errOut)
	_, errOut, code = runCLI(t, "work", "-r", "redis://127.0.0.1:1/0")
	require.Equal(t, 3, code, errOut)
	require.Contains(t, errOut, "cannot reach Redis")
	_, _, code = runCLI(t, "work", "-r", "ftp://x")
	require.Equal(t, 2, code)
	_, errOut, code = runCLI(t, "work", "-r", "redis://127.0.0.1:1/0", "--fetch-pipeline", "0")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "--fetch-pipeline")
	_, errOut, code = runCLI(t, "work", "-r", "redis://127.0.0.1:1/0", "--fetch-ahead", "-1")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "--fetch-ahead")
}
