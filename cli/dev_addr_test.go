package cli

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gojob/gojob/internal/testlog"
	"github.com/gojob/gojob/internal/wait"
)

// gojob dev does not move to a free port when its address is taken: every
// other command would still go to the default one. It exits 5, says what to
// run instead, and leaves the process holding the port alone.
func TestDevRefusesATakenAddress(t *testing.T) {
	// Not parallel: see the note on runCLI (and it changes defaultDevAddr).
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	old := defaultDevAddr
	defaultDevAddr = taken.Addr().String()
	defer func() { defaultDevAddr = old }()

	out, errOut, code := runCLI(t, "dev", "--no-demo")
	require.Equal(t, exitRefused, code, errOut)
	require.Empty(t, out)
	require.Contains(t, errOut, "cannot listen on "+taken.Addr().String())
	require.Contains(t, errOut, "does not move to another port")
	m := regexp.MustCompile(`gojob dev --addr (127\.0\.0\.1:\d+) .*export REDIS_URL=redis://(\S+)/0`).FindStringSubmatch(errOut)
	require.NotNil(t, m, errOut)
	require.Equal(t, m[1], m[2])
	require.NotEqual(t, "127.0.0.1:6379", m[1], "never the default address")
	require.NotContains(t, errOut, "--redis redis://127.0.0.1:6379", "the hint never suggests the Redis on the default port")
	ln, err := net.Listen("tcp", m[1])
	require.NoError(t, err, "the suggested address is free")
	ln.Close()

	// With 6380 taken, the hint suggests the next free one.
	if l6380, err := net.Listen("tcp", "127.0.0.1:6380"); err == nil {
		defer l6380.Close()
	}
	require.NotEqual(t, "127.0.0.1:6380", freeDevAddr())
}

var exportRE = regexp.MustCompile(`export REDIS_URL=(redis://\S+)`)

// On an address other than the default, gojob dev prints the REDIS_URL to
// export, and with it every command of the README reaches the dev server:
// the admin commands, the sidejob commands and the examples.
func TestDevOnAnotherAddressIsReachedThroughREDIS_URL(t *testing.T) {
	t.Parallel()
	bin := gojobBinary(t)
	logs := testlog.New(nil)
	dev := exec.Command(bin, "dev", "--addr", "127.0.0.1:0")
	dev.Env = append(os.Environ(), "REDIS_URL=") // the test's own REDIS_URL must not leak in
	dev.Stdout, dev.Stderr = logs, logs
	require.NoError(t, dev.Start())
	done := make(chan struct{})
	go func() { dev.Wait(); close(done) }()
	t.Cleanup(func() {
		dev.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("gojob dev:\n%s", logs.String())
		}
	})
	var url string
	wait.Within(t, 20*time.Second, "dev to print the REDIS_URL to export", func() bool {
		if m := exportRE.FindStringSubmatch(logs.String()); m != nil {
			url = m[1]
		}
		return url != ""
	})
	require.NotEqual(t, defaultRedisURL, url)
	require.Contains(t, logs.String(), "gojob commands default to "+defaultRedisURL)

	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "REDIS_URL="+url)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "gojob %v: %s", args, out)
		return string(out)
	}
	// The demo jobs ran there: the worker registered and LaterJob waits.
	wait.Within(t, 20*time.Second, "the dev worker and its scheduled demo job", func() bool {
		var st struct {
			Processes int64 `json:"processes"`
			Scheduled int64 `json:"scheduled"`
		}
		return json.Unmarshal([]byte(run("stats", "--json")), &st) == nil && st.Processes == 1 && st.Scheduled == 1
	})
	require.Contains(t, run("scheduled"), "LaterJob")
	require.Contains(t, run("push", "HardJob", "1"), "pushed ")
	// The README's HardJob has a handler in dev: it runs, it does not fail
	// into the retry set with NameError.
	wait.Within(t, 20*time.Second, "HardJob to run", func() bool { return strings.Contains(logs.String(), "HardJob ran") })
	require.NotContains(t, run("retries"), "HardJob")

	// The examples read REDIS_URL too: the README's SideJob steps, then
	// push-inspect.
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+"/", "../examples/push-inspect", "../examples/sidejob-pipeline")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	example := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(dir, name), args...)
		cmd.Env = append(os.Environ(), "REDIS_URL="+url)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s: %s", name, out)
		return string(out)
	}
	example("sidejob-pipeline", "-n", "3")
	require.Contains(t, run("sidejob", "tree"), "Pipeline")
	require.Contains(t, example("push-inspect"), "ReportJob")

	// And all of it is in the dev server.
	conn, err := redis.DialURL(url)
	require.NoError(t, err)
	defer conn.Close()
	n, err := redis.Int(conn.Do("ZCOUNT", "schedule", float64(time.Now().Add(30*time.Minute).Unix()), "+inf"))
	require.NoError(t, err)
	require.Equal(t, 1, n, "push-inspect's ReportJob, an hour from now")
	ids, err := redis.Strings(conn.Do("SMEMBERS", sidejobwire.KeyJobs))
	require.NoError(t, err)
	require.NotEmpty(t, ids, "the pipeline's SideJob jobs")
}

// When REDIS_URL points elsewhere, gojob dev on the default address warns
// that commands in this shell will not reach it.
func TestDevWarnsAboutAnotherREDIS_URL(t *testing.T) {
	// Not parallel: see the note on runCLI (and it sets REDIS_URL).
	t.Setenv("REDIS_URL", "redis://127.0.0.1:1/0")
	out := testlog.New(nil)
	printDevHints(out, defaultRedisURL)
	require.Contains(t, out.String(), "REDIS_URL=redis://127.0.0.1:1/0 is set in this shell")
	require.NotContains(t, out.String(), "export REDIS_URL")
}
