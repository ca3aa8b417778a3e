package fetch

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/sidekiq/wire"
)

func TestOrderStrictOrWeighted(t *testing.T) {
	t.Parallel()
	f := NewOrder([]wire.QueueWeight{{Name: "a"}, {Name: "b"}, {Name: "a"}}, wire.Version6)
	require.True(t, f.Strict())
	require.Equal(t, []any{"queue:a", "queue:b", Timeout}, f.Args(nil))
	require.Equal(t, []string{"a", "b"}, f.Names())
	w := NewOrder([]wire.QueueWeight{{Name: "a", Weight: 3}, {Name: "b", Weight: 1}}, wire.Version6)
	require.False(t, w.Strict())
	first := map[any]int{}
	r := NewRand(1)
	for i := 0; i < 4000; i++ {
		args := w.Args(r)
		require.Len(t, args, 3)
		first[args[0]]++
	}
	// a is first with probability 3/4.
	require.InDelta(t, 3000, first["queue:a"], 200)
}

// 7.0.0-7.0.2 fetch strictly when the weighted list has no duplicates (so
// `-q a,1 -q b,1` is strict there); 6.4 and 7.0.3+ only when no weight is
// given.
func TestOrderStrictnessPerVersion(t *testing.T) {
	t.Parallel()
	ones := []wire.QueueWeight{{Name: "a", Weight: 1}, {Name: "b", Weight: 1}}
	require.True(t, NewOrder(ones, wire.Version{Major: 7, Patch: 1}).Strict())
	require.False(t, NewOrder(ones, wire.Version6).Strict())
	require.False(t, NewOrder(ones, wire.Version7).Strict())
	require.False(t, NewOrder([]wire.QueueWeight{{Name: "a", Weight: 2}, {Name: "b", Weight: 1}}, wire.Version{Major: 7, Patch: 1}).Strict())
	require.True(t, NewOrder([]wire.QueueWeight{{Name: "a"}, {Name: "b"}}, wire.Version8).Strict())
}

// Paused queues leave the fetch's key list, in strict and weighted order;
// with every queue paused the fetch waits until unpaused or quiet.
func TestOrderLeavesPausedQueuesOut(t *testing.T) {
	t.Parallel()
	r := NewRand(1)
	strict := NewOrder([]wire.QueueWeight{{Name: "a"}, {Name: "b"}, {Name: "c"}}, wire.Version7)
	require.False(t, strict.SetPaused(nil), "nothing changed")
	require.True(t, strict.SetPaused([]string{"a", "other"}))
	require.False(t, strict.SetPaused([]string{"a"}), "the same set")
	require.Equal(t, []any{"queue:b", "queue:c", Timeout}, strict.Args(r))
	require.True(t, strict.Paused("a"))
	require.False(t, strict.Paused("other"), "not this order's queue")
	require.False(t, strict.AllPaused())

	weighted := NewOrder([]wire.QueueWeight{{Name: "a", Weight: 3}, {Name: "b", Weight: 1}}, wire.Version7)
	weighted.SetPaused([]string{"a"})
	for range 20 {
		require.Equal(t, []any{"queue:b", Timeout}, weighted.Args(r))
	}
	weighted.SetPaused([]string{"a", "b"})
	require.True(t, weighted.AllPaused())
	quiet := make(chan struct{})
	close(quiet)
	require.False(t, weighted.WaitUnpaused(quiet))
	weighted.SetPaused(nil)
	require.True(t, weighted.WaitUnpaused(make(chan struct{})))
	require.Len(t, weighted.Args(r), 3)
}
