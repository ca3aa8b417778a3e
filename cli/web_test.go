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
