// Package gojobtest builds the real gojob binary for the tests that run it
// as users do (`gojob work`, the admin commands, kill -9).
package gojobtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	once sync.Once
	dir  string
	path string
	err  error
)

// Binary builds ./cmd/gojob once per test process and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	once.Do(build)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// Dir is the directory of Binary, where a test may build its other
// commands; Cleanup removes it.
func Dir(t testing.TB) string {
	t.Helper()
	Binary(t)
	return dir
}

// Cleanup removes what Binary built. TestMain calls it after m.Run.
func Cleanup() {
	if dir != "" {
		os.RemoveAll(dir)
	}
}

func build() {
	root, rerr := moduleRoot()
	if rerr != nil {
		err = rerr
		return
	}
	if dir, err = os.MkdirTemp("", "gojob-bin-"); err != nil {
		return
	}
	path = filepath.Join(dir, "gojob")
	cmd := exec.Command("go", "build", "-o", path, "./cmd/gojob")
	cmd.Dir = root
	if out, berr := cmd.CombinedOutput(); berr != nil {
		err = fmt.Errorf("go build ./cmd/gojob: %v: %s", berr, out)
	}
}

// moduleRoot is the directory of go.mod above the test's directory.
func moduleRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("gojobtest: no go.mod above %s", d)
		}
		d = parent
	}
}
