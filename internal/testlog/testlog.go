// Package testlog is the one goroutine-safe log sink of gojob's tests: a
// zerolog logger whose lines a test can count, and which also go to the
// test's own log.
package testlog

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
)

// Buffer collects log lines. It is safe for concurrent use.
type Buffer struct {
	t   testing.TB
	mu  sync.Mutex
	buf bytes.Buffer
}

// New returns a buffer that also writes each line to t's log.
func New(t testing.TB) *Buffer { return &Buffer{t: t} }

// Write stores p (one JSON line per call from zerolog).
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	b.buf.Write(p)
	b.mu.Unlock()
	if b.t != nil {
		b.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// Logger returns a zerolog logger writing to b.
func (b *Buffer) Logger() zerolog.Logger { return zerolog.New(b) }

// String returns everything logged so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Count returns how many lines at level (such as "error"; "" for any)
// contain substr.
func (b *Buffer) Count(level, substr string) int {
	n := 0
	for _, line := range strings.Split(b.String(), "\n") {
		if line == "" || !strings.Contains(line, substr) {
			continue
		}
		if level == "" || strings.Contains(line, `"level":"`+level+`"`) {
			n++
		}
	}
	return n
}
