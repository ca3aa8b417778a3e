package compat_test

import (
	"os"
	"testing"

	"github.com/gojob/gojob/internal/gojobtest"
)

func TestMain(m *testing.M) {
	// A gojob command run without -r must not reach a Redis the test did
	// not start (a developer's on 6379): point the default nowhere.
	os.Setenv("REDIS_URL", "redis://127.0.0.1:1/0")
	code := m.Run()
	gojobtest.Cleanup()
	os.Exit(code)
}
