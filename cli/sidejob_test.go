package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gojob/gojob/internal/testlog"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidejob"
)

// runSideJobCLI runs `gojob sidejob …` in an App that has only the sidejob
// command (not parallel: see runCLI).
func runSideJobCLI(ctx context.Context, args ...string) (string, string, int) {
	out := testlog.New(nil)
	return runSideJobCLITo(ctx, out, args...)
}

func runSideJobCLITo(ctx context.Context, out *testlog.Buffer, args ...string) (string, string, int) {
	errb := testlog.New(nil)
	app := &ucli.App{
		Name: "gojob", Writer: out, ErrWriter: errb,
		ExitErrHandler: func(*ucli.Context, error) {},
		Commands:       []*ucli.Command{sidejobCommand(&options{})},
	}
	code := 0
	if err := app.RunContext(ctx, append([]string{"gojob", "sidejob"}, args...)); err != nil {
		code = 1
		var ec ucli.ExitCoder
		if errors.As(err, &ec) {
			code = ec.ExitCode()
		}
		fmt.Fprintln(errb, err)
	}
	return out.String(), errb.String(), code
}

func TestSideJobCommands(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	pool := srv.Pool(t)
	c, err := sidejob.NewClient(&sidejob.Config{Pool: pool})
	require.NoError(t, err)
	// The worker class as its serving process registers it (ServerSetup).
	conn := pool.Get()
	_, err = conn.Do("HSET", "workers:q", "W", `{"inports":{"in":{}},"outports":{"out":{}}}`)
	conn.Close()
	require.NoError(t, err)
	r := "--redis=" + srv.URL()
	run := func(args ...string) string {
		t.Helper()
		out, errOut, code := runSideJobCLI(ctx, append(args[:1:1], append([]string{r}, args[1:]...)...)...)
		require.Zero(t, code, "%v: %s", args, errOut)
		return out
	}

	out := run("create", "--json", "--by", "me", "--alias", "top", "--inports", `{"extra":{"default":5,"channels":["/c"]}}`, "q", "W", "1", "x")
	require.JSONEq(t, `{"job":1}`, out)
	require.Contains(t, run("create", "--parent", "top", "--name", "kid", "q", "W"), "created job 2")
	require.Equal(t, `{"queue":"q","class":"W","args":[1,"x"]}`, get(t, pool, "job:1:worker"))
	require.Equal(t, "job:1", get(t, pool, "job:2:created_by"))

	var shown map[string]any
	require.NoError(t, json.Unmarshal([]byte(run("show", "--json", "top")), &shown))
	require.Equal(t, "queued", shown["status"])
	require.Equal(t, map[string]any{"kid": float64(2)}, shown["children"])
	text := run("show", "1")
	require.Contains(t, text, "status   queued")
	require.Contains(t, text, "in:extra  0     5        /c")
	require.Regexp(t, `created  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC by "me"`, text, "a time with its zone")
	require.Contains(t, text, "ran at   never")

	require.Contains(t, run("write", "1", "in", "3", `{"a":1}`), "wrote 2 value(s) to job:1:in:in")
	require.Equal(t, "3\n", run("read", "1", "in"))
	require.Equal(t, "{\"a\":1}\n", run("read", "1", "in"))
	require.Equal(t, "(no data)\n", run("read", "1", "in"))
	run("write", "--out", "--default", "2", "out", `"d"`)
	require.Contains(t, run("ports", "2"), `out:out  0     "d"`)

	require.Equal(t, "1 W [queued]\n└── kid: 2 W [queued]\n", run("tree"))
	require.Contains(t, run("terminate", "--recursive", "1"), "job 1 terminating")
	require.Contains(t, run("run", "1"), "not run: status terminating")
	require.Contains(t, run("run", "--force", "1"), "job 1 queued")
	_, _, code := runSideJobCLI(ctx, "delete", r, "1")
	require.Equal(t, exitRefused, code, "not terminated")
	// As a worker run of the terminating jobs would leave them.
	for _, id := range []int64{1, 2} {
		conn := pool.Get()
		_, err := conn.Do("SET", fmt.Sprintf("job:%d:status", id), "terminated")
		conn.Close()
		require.NoError(t, err)
	}
	require.Contains(t, run("delete", "1"), "deleted job 1")
	require.Equal(t, "no jobs\n", run("tree"))
	_, _, code = runSideJobCLI(ctx, "show", r, "1")
	require.Equal(t, 4, code)

	// log --follow prints entries until its context ends
	fctx, cancel := context.WithCancel(ctx)
	follow := testlog.New(nil)
	done := make(chan string)
	go func() {
		out, _, _ := runSideJobCLITo(fctx, follow, "log", r, "--follow")
		done <- out
	}()
	wait.Within(t, 20*time.Second, "the log subscription", func() bool {
		conn := pool.Get()
		defer conn.Close()
		v, _ := redis.Values(conn.Do("PUBSUB", "NUMSUB", sidejobwire.LogChannel))
		n, _ := redis.Int(v[1], nil)
		return n == 1
	})
	run("log", "hello", "there")
	run("publish", "/nowhere", "7")
	require.NoError(t, c.Log(ctx, map[string]any{"job": 9, "message": "second"}))
	wait.Within(t, 20*time.Second, "both entries", func() bool { return strings.Contains(follow.String(), "second") })
	cancel()
	followed := <-done
	require.Contains(t, followed, "message=hello there")
	require.Contains(t, followed, "job=9 message=second")
	require.Equal(t, 2, strings.Count(followed, "\n"))
}

func get(t *testing.T, pool *redis.Pool, key string) string {
	t.Helper()
	conn := pool.Get()
	defer conn.Close()
	s, err := redis.String(conn.Do("GET", key))
	require.NoError(t, err)
	return s
}
