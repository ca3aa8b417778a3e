package compat_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

func TestMain(m *testing.M) {
	// A command run without -r must not reach a Redis the test did not
	// start (a developer's on 6379): point the default nowhere.
	os.Setenv("REDIS_URL", "redis://127.0.0.1:1/0")
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// gojobBinary builds the real gojob binary once per test run.
func gojobBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "gojob-compat-bin-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "gojob")
		if out, err := exec.Command("go", "build", "-o", binPath, "../cmd/gojob").CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}
