package sidekiq

import (
	"context"
	"sync"

	"github.com/gojob/gojob/sidekiq/internal/fetch"
)

// DeferAck lets a server middleware hold back the acknowledgement of the
// job it runs until it releases it: with a reliable fetch, a job that
// succeeds stays in its in-progress list (where a live process recovers it
// if this one dies) until then, while its slot already runs the next job.
// The durable middleware uses it to delete a completed job's row in a
// group with others without making the slot wait: the job leaves Redis
// only after its row is gone, so a crash in between leaves it recoverable
// rather than lost.
//
// ok is false when the fetch keeps no running job in Redis (basic and
// batch fetch) or ctx is not a job's: the middleware must then finish its
// work before it returns. The acknowledgement must be released once
// (Release, or ReleaseAcks with others), whatever happens; releasing does
// nothing when the job did not succeed (its failure was written already)
// or was given back at a hard shutdown. Server.Stop waits for the held
// acknowledgements (within its shutdown deadline) before it closes the
// fetch.
func DeferAck(ctx context.Context) (ack DeferredAck, ok bool) {
	g, _ := ctx.Value(ackGateKey{}).(*ackGate)
	if g == nil {
		return DeferredAck{}, false
	}
	g.mu.Lock()
	g.deferred = true
	g.mu.Unlock()
	return DeferredAck{g}, true
}

// DeferredAck is an acknowledgement a middleware holds back (DeferAck).
// The zero value is none: releasing it does nothing.
type DeferredAck struct{ g *ackGate }

// Release releases the acknowledgement: the job leaves its in-progress
// list once the processor is done with it.
func (a DeferredAck) Release() { ReleaseAcks(a) }

// ReleaseAcks releases many acknowledgements at once: those whose jobs the
// processor is done with reach the fetch in one call (one queueing of the
// acknowledgements rather than one per job).
func ReleaseAcks(acks ...DeferredAck) {
	var srv *Server
	units := make([]fetch.Unit, 0, len(acks))
	for _, a := range acks {
		if a.g == nil {
			continue
		}
		s, u, ok := a.g.release()
		if !ok {
			continue
		}
		if srv != nil && s != srv {
			srv.ackDeferred(units)
			units = units[:0]
		}
		srv = s
		units = append(units, u)
	}
	if len(units) > 0 {
		srv.ackDeferred(units)
	}
}

// ackDeferrer is a fetch that must know which finished jobs' acknowledgement
// is held back: its slots have moved on, and its own-list sweep must not
// take those jobs for orphans.
type ackDeferrer interface {
	Defer(u fetch.Unit) fetch.Unit
}

// deferredFinisher is a fetch that takes many successes at once.
type deferredFinisher interface {
	FinishSuccesses(units []fetch.Unit)
}

// ackDeferred acknowledges successes a middleware held back.
func (s *Server) ackDeferred(units []fetch.Unit) {
	if f, ok := s.fetcher.(deferredFinisher); ok {
		f.FinishSuccesses(units)
	} else {
		for _, u := range units {
			s.fetcher.Finish(u, nil)
		}
	}
	s.deferredAcks.Add(-len(units))
}

type ackGateKey struct{}

// ackGate is where the processor and a middleware that deferred the
// acknowledgement meet: whichever comes second acknowledges the job.
type ackGate struct {
	mu       sync.Mutex
	deferred bool
	released bool
	// srv and unit are the acknowledgement the processor left (hold).
	srv  *Server
	unit fetch.Unit
}

// release marks the gate released and returns the acknowledgement to
// send, if the processor left one.
func (g *ackGate) release() (*Server, fetch.Unit, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.released {
		return nil, fetch.Unit{}, false
	}
	g.released = true
	if g.srv == nil {
		return nil, fetch.Unit{}, false
	}
	s, u := g.srv, g.unit
	g.srv, g.unit = nil, fetch.Unit{}
	return s, u, true
}

// wasDeferred reports whether a middleware called DeferAck for the job.
func (g *ackGate) wasDeferred() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.deferred
}

// hold gives the gate the acknowledgement of u when a middleware deferred
// it and has not released it yet; false means: acknowledge now.
func (g *ackGate) hold(s *Server, u fetch.Unit) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.deferred || g.released {
		return false
	}
	g.srv, g.unit = s, u
	return true
}
