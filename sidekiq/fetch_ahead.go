package sidekiq

import (
	"context"

	"github.com/gojob/gojob/sidekiq/internal/fetch"
	"github.com/gojob/gojob/sidekiq/wire"
)

// FetchAhead tells the fetch that the job ctx belongs to is about to wait
// for something other than its own work, so that its slot may take its
// next jobs meanwhile (two at most). The durable middleware calls it
// before it waits for its row's lock, which is committed in a group with
// other slots' locks: when the group is answered and the job is done, the
// next job is already there, its lock already on its way.
//
// prepare, when not nil, is called with each next job once it is fetched
// (on the goroutine that fetched it, before the job can start), and what
// it returns is that job's PreparedAhead. The durable middleware queues
// the next job's lock there, so that the lock is committed while this job
// finishes. prepare is not called for a job that cannot be parsed (it
// goes to the dead set when its slot takes it), and a job prepared may
// still be given back to its queue without running (see below): prepare
// must leave nothing that a later run of the job, here or in another
// process, would not make right.
//
// Only the reliable fetch (FetchReliable) fetches ahead: the jobs fetched
// ahead wait in the process's in-progress list, where a crash leaves them
// recoverable, and go back to the pop end of their queue when the server
// goes quiet or when the slot has not taken the oldest within 25 ms (a
// long job does not hold them). A slot holds at most four jobs ahead,
// fewer when its last job took more than 3 ms (why and how many:
// sidekiq/internal/fetch/ahead.go), fetches ahead only when its last job
// took less than 5 ms, and never blocks for one (an empty queue
// fetches nothing). FetchAhead reports whether the slot fetches ahead;
// elsewhere, outside a job, or a second time for the same job it does
// nothing and reports false.
func FetchAhead(ctx context.Context, prepare func(next *wire.Job) any) bool {
	u, _ := ctx.Value(fetchAheadKey{}).(*fetch.Unit)
	if u == nil {
		return false
	}
	if prepare == nil {
		return u.FetchAhead(nil)
	}
	return u.FetchAhead(func(next *fetch.Unit) {
		job, err := wire.ParseFetchedJob(next.Raw)
		if err != nil {
			return // the processor sends it to the dead set
		}
		next.Prepared = &preparedAhead{job: job, v: prepare(job)}
	})
}

// PreparedAhead returns what the prepare of a FetchAhead made for the job
// ctx belongs to, when it was fetched ahead and prepared.
func PreparedAhead(ctx context.Context) (any, bool) {
	u, _ := ctx.Value(fetchAheadKey{}).(*fetch.Unit)
	if u == nil {
		return nil, false
	}
	p, ok := u.Prepared.(*preparedAhead)
	if !ok {
		return nil, false
	}
	return p.v, true
}

type fetchAheadKey struct{}

// preparedAhead is a job fetched ahead and prepared: the job parsed (the
// processor runs it as it is) and what the prepare returned.
type preparedAhead struct {
	job *wire.Job
	v   any
}
