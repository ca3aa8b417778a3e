// Package wait is the one polling helper of gojob's tests, for effects that
// happen in Redis, in a database or in another process, where the test has
// no signal to wait on. Prefer a channel or a test hook where there is one.
package wait

import (
	"testing"
	"time"
)

// DefaultTimeout is how long For waits.
const DefaultTimeout = 10 * time.Second

// For polls cond every 5 ms until it holds, and fails the test after
// DefaultTimeout. cond runs on the test's goroutine, so it may use require.
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Within(t, DefaultTimeout, what, cond)
}

// Within is For with a timeout of its own.
func Within(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Until polls cond as For does and reports whether it held within
// DefaultTimeout, failing nothing: for goroutines other than the test's,
// which must not stop the test with t.Fatal (a handler the fetch runs,
// say), and which then report with assert.
func Until(cond func() bool) bool {
	return UntilWithin(DefaultTimeout, cond)
}

// UntilWithin is Until with a timeout of its own: for a test that says
// more than "timed out" when cond does not come to hold.
func UntilWithin(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}
