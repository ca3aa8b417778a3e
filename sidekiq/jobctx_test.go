package sidekiq

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type jobCtxKey struct{}

func newTestJobCtx() (*jobCtx, *jobWatch) {
	w := &jobWatch{}
	base := context.WithoutCancel(context.WithValue(context.Background(), jobCtxKey{}, "v"))
	return &jobCtx{base: base, w: w}, w
}

// A job context behaves as a context.WithCancelCause of the server's
// base whatever its handler looked at, and when: the cancellation it
// makes only on demand is never observably missing.
func TestJobContextActsAsACancelCauseContext(t *testing.T) {
	t.Parallel()
	cause := errors.New("cancelled by gojob cancel")

	t.Run("values of the base need no cancellation", func(t *testing.T) {
		c, w := newTestJobCtx()
		require.Equal(t, "v", c.Value(jobCtxKey{}))
		require.Same(t, w, c.Value(watchKey{}))
		_, ok := c.Deadline()
		require.False(t, ok)
		require.Equal(t, ctxNone, c.state.Load())
		c.end()
		require.ErrorIs(t, c.Err(), context.Canceled, "looked at after the job ended")
		require.ErrorIs(t, context.Cause(c), context.Canceled)
		require.True(t, isClosed(c.Done()))
	})

	t.Run("a handler that waits sees the cause", func(t *testing.T) {
		c, _ := newTestJobCtx()
		done := c.Done()
		require.False(t, isClosed(done))
		require.NoError(t, c.Err())
		c.cancelJob(cause)
		<-done
		require.ErrorIs(t, c.Err(), context.Canceled)
		require.Same(t, cause, context.Cause(c))
		c.end()
		require.Same(t, cause, context.Cause(c), "the first cause stays")
	})

	t.Run("cancelled before anything looked", func(t *testing.T) {
		c, _ := newTestJobCtx()
		c.cancelJob(cause)
		require.Same(t, cause, context.Cause(c))
		require.True(t, isClosed(c.Done()))
	})

	t.Run("child contexts end with the job", func(t *testing.T) {
		c, _ := newTestJobCtx()
		child, stop := context.WithTimeout(c, time.Hour)
		defer stop()
		var fired sync.WaitGroup
		fired.Add(1)
		context.AfterFunc(c, fired.Done)
		c.end()
		<-child.Done()
		require.ErrorIs(t, child.Err(), context.Canceled)
		fired.Wait()
	})

	t.Run("a first look racing the end of the job", func(t *testing.T) {
		for range 200 {
			c, _ := newTestJobCtx()
			looked := make(chan (<-chan struct{}))
			go func() { looked <- c.Done() }()
			c.end()
			<-<-looked // closed, whichever came first
			require.ErrorIs(t, c.Err(), context.Canceled)
		}
	})

	t.Run("concurrent first looks and a cancel", func(t *testing.T) {
		c, _ := newTestJobCtx()
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-c.Done()
				require.Same(t, cause, context.Cause(c))
			}()
		}
		c.cancelJob(cause)
		wg.Wait()
		c.end()
	})
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
