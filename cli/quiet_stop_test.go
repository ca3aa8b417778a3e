package cli

import (
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
)

// gojob quiet and stop refuse an identity that is not a live process (exit
// 4, and no <identity>-signals key for no one), signal a live one, and with
// "all" and no process say so.
func TestQuietAndStopRefuseAnUnknownIdentity(t *testing.T) {
	// Not parallel: see the note on runCLI.
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	url := rs.URL()
	conn, err := rs.Dial()
	require.NoError(t, err)
	defer conn.Close()

	out, errOut, code := runCLI(t, "quiet", "-r", url, "all")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "no live process to quiet\n", out)

	for _, cmd := range []string{"quiet", "stop"} {
		out, errOut, code = runCLI(t, cmd, "-r", url, "ghost-identity")
		require.Equal(t, exitNotFound, code, cmd)
		require.Empty(t, out)
		require.Contains(t, errOut, "no live process ghost-identity")
	}
	n, err := redis.Int(conn.Do("EXISTS", "ghost-identity-signals"))
	require.NoError(t, err)
	require.Zero(t, n, "no signals list for a ghost")

	w := startWorker(t, url, "-c", "1", "--sidekiq-version", "6") // a beat every 5 s
	id := w.Identity(t)
	out, errOut, code = runCLI(t, "quiet", "-r", url, id)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "sent TSTP to "+id)
	out, errOut, code = runCLI(t, "stop", "-r", url, "all")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "sent TERM to "+id)
	done := make(chan error, 1)
	go func() { done <- w.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, w.Logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("gojob work did not stop after gojob stop all:\n%s", w.Logs.String())
	}
}
