package tick

import (
	"context"
	"testing"
	"time"
)

func TestEveryStopsWhenStepSaysSo(t *testing.T) {
	n := 0
	Every(context.Background(), time.Millisecond, func() bool {
		n++
		return n < 3
	})
	if n != 3 {
		t.Fatalf("step ran %d times, want 3", n)
	}
}

func TestEveryEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	Every(ctx, time.Hour, func() bool {
		t.Error("step ran after the context ended")
		return true
	})
}
