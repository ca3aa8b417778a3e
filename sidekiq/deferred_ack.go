package sidekiq

import (
	"context"
	"sync"
)

// DeferAck lets a server middleware hold back the acknowledgement of the
// job it runs until it calls release: with a reliable fetch, a job that
// succeeds stays in its in-progress list (where a live process recovers it
// if this one dies) until then, while its slot already runs the next job.
// The durable middleware uses it to delete a completed job's row in a
// group with others without making the slot wait: the job leaves Redis
// only after its row is gone, so a crash in between leaves it recoverable
// rather than lost.
//
// ok is false when the fetch keeps no running job in Redis (basic and
// batch fetch) or ctx is not a job's: the middleware must then finish its
// work before it returns. release must be called once, whatever happens;
// it does nothing when the job did not succeed (its failure was written
// already) or was given back at a hard shutdown. Server.Stop waits for the
// held acknowledgements (within its shutdown deadline) before it closes
// the fetch.
func DeferAck(ctx context.Context) (release func(), ok bool) {
	g, _ := ctx.Value(ackGateKey{}).(*ackGate)
	if g == nil {
		return nil, false
	}
	g.mu.Lock()
	g.deferred = true
	g.mu.Unlock()
	return g.release, true
}

type ackGateKey struct{}

// ackGate is where the processor and a middleware that deferred the
// acknowledgement meet: whichever comes second runs finish.
type ackGate struct {
	mu       sync.Mutex
	deferred bool
	released bool
	finish   func()
}

func (g *ackGate) release() {
	g.mu.Lock()
	if g.released {
		g.mu.Unlock()
		return
	}
	g.released = true
	f := g.finish
	g.mu.Unlock()
	if f != nil {
		f()
	}
}

// wasDeferred reports whether a middleware called DeferAck for the job.
func (g *ackGate) wasDeferred() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.deferred
}

// hold gives the gate the acknowledgement when a middleware deferred it
// and has not released it yet; false means: acknowledge now.
func (g *ackGate) hold(finish func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.deferred || g.released {
		return false
	}
	g.finish = finish
	return true
}
