// Package rubytest runs real Ruby Sidekiq (Debian's ruby-sidekiq 6.4.1)
// against a test's redis-server, for the compat tests.
package rubytest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Prelude is prepended to every script: it loads Sidekiq and the JSON and
// API code, and points Sidekiq's client and server at $REDIS_URL.
const Prelude = `
$stdout.sync = true
require "json"
require "sidekiq"
require "sidekiq/api"
Sidekiq.configure_client { |c| c.redis = { url: ENV.fetch("REDIS_URL") } }
Sidekiq.configure_server { |c| c.redis = { url: ENV.fetch("REDIS_URL") } }
Sidekiq.logger.level = Logger::WARN
`

// Require fails the test when Ruby Sidekiq is missing: `make test` installs
// it, so a missing Ruby is a broken setup, never a skip.
func Require(t testing.TB) {
	t.Helper()
	if err := exec.Command("ruby", "-e", `require "sidekiq"; exit(Sidekiq::VERSION == "6.4.1" ? 0 : 3)`).Run(); err != nil {
		t.Fatalf("rubytest: Ruby Sidekiq 6.4.1 is not installed (make test installs it): %v", err)
	}
}

// Run runs a Ruby script (after Prelude) with REDIS_URL=redisURL and returns
// its standard output. A non-zero exit fails the test with stderr.
func Run(t testing.TB, redisURL, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := filepath.Join(t.TempDir(), "script.rb")
	if err := os.WriteFile(f, []byte(Prelude+script), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "ruby", f)
	cmd.Env = append(os.Environ(), "REDIS_URL="+redisURL)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("rubytest: ruby failed: %v\nstderr:\n%s\nstdout:\n%s", err, stderr.String(), stdout.String())
	}
	return stdout.String()
}

// Start starts a long-running Ruby script (after Prelude) in the background
// and stops it (SIGINT, then SIGKILL after 10 s) at the end of the test.
func Start(t testing.TB, redisURL, script string, extraEnv ...string) *exec.Cmd {
	t.Helper()
	f := filepath.Join(t.TempDir(), "script.rb")
	if err := os.WriteFile(f, []byte(Prelude+script), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ruby", f)
	cmd.Env = append(append(os.Environ(), "REDIS_URL="+redisURL), extraEnv...)
	cmd.Stdout = testWriter{t}
	cmd.Stderr = testWriter{t}
	if err := cmd.Start(); err != nil {
		t.Fatalf("rubytest: start ruby: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	stopAtCleanup(t, cmd, done, os.Interrupt, 10*time.Second)
	return cmd
}

// stopAtCleanup stops cmd at the end of the test: sig, then SIGKILL when
// it has not exited (done closed) within grace.
func stopAtCleanup(t testing.TB, cmd *exec.Cmd, done <-chan struct{}, sig os.Signal, grace time.Duration) {
	t.Cleanup(func() {
		cmd.Process.Signal(sig)
		select {
		case <-done:
		case <-time.After(grace):
			cmd.Process.Kill()
			<-done
		}
	})
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("ruby: %s", bytes.TrimRight(p, "\n"))
	return len(p), nil
}
