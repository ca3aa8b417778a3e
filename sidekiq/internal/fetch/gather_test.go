package fetch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/wait"
)

// A gathering taker is woken once, by the worker whose freed slot makes
// the number it waits for, and not by each freed slot before that one. It
// takes only the tokens that are there: never more jobs than free slots.
func TestGatheringTakerIsWokenOnceItsSlotsAreFree(t *testing.T) {
	t.Parallel()
	const conc = 8 // target: conc/2 = 4 slots, one of them in hand
	f := &reliableFetch{cfg: &Config{Concurrency: conc}, idle: make(chan int, conc)}
	for i := range f.gatherers {
		f.gatherers[i].init(time.Minute)
	}
	g := &f.gatherers[0]
	got := make(chan []int, 1)
	go func() { got <- f.gather(g, true, []int{0}) }()
	wait.For(t, "the taker waits for 3 slots", func() bool { return g.want.Load() == 3 })
	f.freed(1)
	f.freed(2)
	require.Empty(t, g.enough, "two of three freed: no wake-up")
	time.Sleep(20 * time.Millisecond)
	require.Empty(t, got, "still gathering")
	f.freed(3)
	select {
	case slots := <-got:
		require.Equal(t, []int{0, 1, 2, 3}, slots)
	case <-time.After(10 * time.Second):
		t.Fatal("the third freed slot did not wake the taker (its window is a minute)")
	}
	require.Zero(t, g.want.Load(), "no longer waiting")
	require.Empty(t, f.idle, "every token taken, none invented")
}

// A gathering taker whose window ends takes what is free then, however
// few.
func TestGatheringTakerTakesWhatIsFreeWhenItsWindowEnds(t *testing.T) {
	t.Parallel()
	const conc = 8
	f := &reliableFetch{cfg: &Config{Concurrency: conc}, idle: make(chan int, conc)}
	for i := range f.gatherers {
		f.gatherers[i].init(50 * time.Millisecond)
	}
	f.freed(5)
	require.Equal(t, []int{0, 5}, f.gather(&f.gatherers[0], true, []int{0}))
	require.Equal(t, []int{0}, f.gather(&f.gatherers[0], false, []int{0}), "not busy: no wait, nothing free")
}
