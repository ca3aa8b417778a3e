package cli

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/testlog"
	"github.com/gojob/gojob/internal/wait"
)

// dashboardURL waits for the "dashboard: URL" line of out.
func dashboardURL(t *testing.T, out *testlog.Buffer) string {
	t.Helper()
	var url string
	wait.Within(t, 20*time.Second, "the dashboard URL", func() bool {
		for _, line := range strings.Split(out.String(), "\n") {
			if rest, ok := strings.CutPrefix(line, "dashboard: "); ok {
				url = strings.Fields(rest)[0]
				return true
			}
		}
		return false
	})
	return url
}

func getStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func TestWebServesTheDashboard(t *testing.T) {
	// Not parallel: see the note on runCLI.
	srv := redistest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	out := testlog.New(nil)
	done := make(chan int)
	go func() {
		done <- Run(ctx, []string{"gojob", "web", "-r", srv.URL(), "--addr", "127.0.0.1:0", "--read-only"}, out, io.Discard)
	}()
	url := dashboardURL(t, out)
	require.Contains(t, out.String(), "(read-only)")
	require.Equal(t, 200, getStatus(t, url))
	require.Equal(t, 200, getStatus(t, url+"metrics"))
	cancel()
	require.Equal(t, 0, <-done)
}

// --base-path mounts every page under a prefix (the printed URL has it);
// --allow-host adds a name the Host header may carry; any other is 403.
func TestWebBasePathAndAllowedHosts(t *testing.T) {
	// Not parallel: see the note on runCLI.
	srv := redistest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	out := testlog.New(nil)
	done := make(chan int)
	go func() {
		done <- Run(ctx, []string{"gojob", "web", "-r", srv.URL(), "--addr", "127.0.0.1:0",
			"--base-path", "/ops/sidekiq", "--allow-host", "jobs.internal"}, out, io.Discard)
	}()
	url := dashboardURL(t, out)
	require.True(t, strings.HasSuffix(url, "/ops/sidekiq/"), url)
	require.Equal(t, 200, getStatus(t, url+"retries"))
	for host, want := range map[string]int{"jobs.internal": 200, "localhost:9292": 200, "rebind.example": 403} {
		req, err := http.NewRequest("GET", url, nil)
		require.NoError(t, err)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, host)
	}
	cancel()
	require.Equal(t, 0, <-done)
	_, errOut, code := runCLI(t, "web", "-r", srv.URL(), "--addr", "127.0.0.1:0", "--base-path", "ops")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "must start with /")
}

func TestWebRefusesAnOpenAddressWithoutAuth(t *testing.T) {
	_, errOut, code := runCLI(t, "web", "-r", "redis://127.0.0.1:1/0", "--addr", "0.0.0.0:0")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--auth")
	_, errOut, code = runCLI(t, "web", "-r", "redis://127.0.0.1:1/0", "--addr", "nonsense")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "HOST:PORT")
}

func TestDevServesTheDashboard(t *testing.T) {
	// Not parallel: see the note on runCLI.
	ctx, cancel := context.WithCancel(context.Background())
	out := testlog.New(nil)
	done := make(chan int)
	go func() {
		done <- Run(ctx, []string{"gojob", "dev", "--addr", "127.0.0.1:0", "--web-addr", "127.0.0.1:0", "--log-level", "warn"}, out, io.Discard)
	}()
	url := dashboardURL(t, out)
	require.Equal(t, 200, getStatus(t, url+"retries"))
	cancel()
	require.Equal(t, 0, <-done)
}

// Stopping `gojob dev` while it is still starting (pushing its demo jobs)
// is a normal stop, not a failure.
func TestDevStoppedWhileStartingExitsZero(t *testing.T) {
	// Not parallel: see the note on runCLI.
	for range 5 {
		ctx, cancel := context.WithCancel(context.Background())
		out := testlog.New(nil)
		done := make(chan int)
		go func() {
			done <- Run(ctx, []string{"gojob", "dev", "--addr", "127.0.0.1:0", "--web-addr", "127.0.0.1:0", "--log-level", "warn"}, out, out)
		}()
		dashboardURL(t, out)
		cancel()
		require.Equal(t, 0, <-done, out.String())
	}
}

func TestWebAllowHostsNamesTheListenAddress(t *testing.T) {
	require.Equal(t, []string{"a.example", "10.1.2.3"}, webAllowHosts("10.1.2.3:9292", []string{"a.example"}))
	all := webAllowHosts("0.0.0.0:9292", nil)
	require.Contains(t, all, "127.0.0.1", "the machine's addresses stand for 0.0.0.0")
	require.NotContains(t, all, "0.0.0.0")
}
