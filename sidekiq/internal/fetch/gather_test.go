package fetch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/wait"
)

// A batched fetcher gathering idle slots for its next take is woken once,
// by the worker whose freed slot makes the number it waits for, and not
// by each freed slot before that one. It takes only the tokens that are
// there: never more jobs than free slots.
func TestGatheringFetcherIsWokenOnceItsSlotsAreFree(t *testing.T) {
	t.Parallel()
	const conc = 8 // target: conc/2-1 = 3 slots
	f := &reliableBatch{cfg: &Config{Concurrency: conc}, idle: make(chan struct{}, conc)}
	for i := range f.gatherers {
		f.gatherers[i].init(time.Minute)
	}
	g := &f.gatherers[0]
	got := make(chan int, 1)
	go func() { got <- f.gather(g, true) }()
	wait.For(t, "the fetcher waits for 3 slots", func() bool { return g.want.Load() == 3 })
	f.freed()
	f.freed()
	require.Empty(t, g.enough, "two of three freed: no wake-up")
	time.Sleep(20 * time.Millisecond)
	require.Empty(t, got, "still gathering")
	f.freed()
	select {
	case k := <-got:
		require.Equal(t, 3, k)
	case <-time.After(10 * time.Second):
		t.Fatal("the third freed slot did not wake the fetcher (its window is a minute)")
	}
	require.Zero(t, g.want.Load(), "no longer waiting")
	require.Empty(t, f.idle, "every token taken, none invented")
}

// A gathering fetcher whose window ends takes what is free then, however
// few.
func TestGatheringFetcherTakesWhatIsFreeWhenItsWindowEnds(t *testing.T) {
	t.Parallel()
	const conc = 8
	f := &reliableBatch{cfg: &Config{Concurrency: conc}, idle: make(chan struct{}, conc)}
	for i := range f.gatherers {
		f.gatherers[i].init(50 * time.Millisecond)
	}
	f.freed()
	require.Equal(t, 1, f.gather(&f.gatherers[0], true))
	require.Zero(t, f.gather(&f.gatherers[0], false), "not busy: no wait, nothing free")
}
