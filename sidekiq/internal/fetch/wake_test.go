package fetch

import (
	"fmt"
	"testing"
	"time"

	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Every job pushed while the takers are parked wakes them, whichever queue
// it is in and however the wakes of the queues interleave: jobs pushed one
// at a time to three queues, each waited for before the next, all run
// although the wakers' and blockers' timeouts are a minute (a job missed
// would wait for one).
func TestReliableNoticesEveryJobPushedWhileIdle(t *testing.T) {
	t.Parallel()
	b := reliableBundle(t, nil, func(c *Config) {
		c.Concurrency = 3
		c.Order = NewOrder([]wire.QueueWeight{{Name: "a"}, {Name: "b"}, {Name: "c", Weight: 0}}, wire.Version7)
		c.BlockSeconds = 60 // a job missed would wait a minute
	})
	var f *reliableFetch
	b.finishWith(func() Fetcher { return f })
	f = newReliable(t, b)
	b.start(t, f)
	t.Cleanup(f.Close)
	for i := range 300 {
		q := []string{"a", "a", "b", "c"}[i%4]
		b.push(t, q, fmt.Sprintf("j%d", i))
		if i%7 == 0 {
			time.Sleep(time.Duration(i%5) * time.Millisecond)
		}
		wait.For(t, fmt.Sprintf("job %d, pushed to %s", i, q), func() bool { return b.processed() == i+1 })
	}
}
