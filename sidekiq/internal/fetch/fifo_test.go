package fetch

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A fifo gives its items back in the order they were pushed, however
// pushes, pops and takes interleave, and reuses the room taken when it
// never empties.
func TestFifoKeepsItsOrderAndReusesItsRoom(t *testing.T) {
	var q fifo[int]
	pushed, out := 0, 0
	push := func(n int) {
		for range n {
			q.push(pushed)
			pushed++
		}
	}
	push(3)
	var buf []int
	for round := range 300 {
		k := round%2 + 1
		push(k)
		if round%3 == 0 {
			require.Equal(t, out, *q.front())
			require.Equal(t, out, q.pop())
			out++
			k--
		}
		buf = q.take(buf[:0], k)
		for _, x := range buf {
			require.Equal(t, out, x)
			out++
		}
		require.Equal(t, 3, q.len())
		require.LessOrEqual(t, cap(q.items), 16, "the taken room is reused")
	}
	rest := q.take(nil, 10)
	require.Equal(t, []int{out, out + 1, out + 2}, rest)
	require.Zero(t, q.len())
	require.Zero(t, q.head, "an emptied queue starts over")
	push(1)
	require.Equal(t, pushed-1, q.pop())
}
