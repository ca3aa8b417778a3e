package durable

import (
	"bytes"
	"math"
	"strconv"
	"time"

	"github.com/gojob/gojob/durable/internal/redisfind"
	"github.com/gojob/gojob/durable/internal/store"
)

// Targeted lookups: the reconciler finds a page's jobs in Redis with
// commands aimed at each row, so that a pass costs the rows that are due,
// not the size of Redis (a million-entry retry set costs nothing to rows
// whose jobs are elsewhere). A row's base is assume_dead_at minus its
// extension, the moment its deadline was last set:
//
//   - retry and schedule sets at the base itself: a scheduled push sets
//     the deadline to at + extension, and the reconciler sets it to the
//     entry's score + extension when it finds a job in a set;
//   - retry set, for a row that records an error: a failure (the server
//     middleware's unlock) sets the deadline to the failure time +
//     extension, and the retry is due the default retry delay later
//     (count⁴ + 15 s + a jitter of at most 10 × (count + 1) s;
//     sidekiq/retry.go), the count read from the row's retry_count;
//   - dead set, for a row that records an error: a job whose retries ran
//     out dies right after its unlock, just after the base;
//   - queue: its oldest jobs, from the pop end, down to the newest job
//     pushed before the page's latest base (its enqueued_at): a job pushed
//     later is not one of the page's;
//   - in-progress lists: the lists gojob's reliable fetch registers (as
//     many jobs as the processes run).
//
// A job these miss (a custom retry delay, a job killed by hand, an
// unregistered in-progress list of a Ruby fetcher) gets its first strike;
// before a second strike kills it, the candidates of the pass are searched
// by streaming the queues and sets (wire.FindIn*, resolveRest), which
// costs the size of Redis once per pass that has candidates. The reads
// themselves are redisfind's.

// windowSlack widens every window around a base.
const windowSlack = 2 * time.Second

// lookupRow is a row with what its windows need.
type lookupRow struct {
	rw     *store.Row
	base   time.Time
	count  int  // the retry count of its next retry
	failed bool // the server middleware recorded an error on the row
}

func (r *Reconciler) lookupRow(rw *store.Row) *lookupRow {
	lr := &lookupRow{rw: rw, base: rw.AssumeDeadAt.Add(-r.ext(rw))}
	item := []byte(rw.ItemJSON)
	if c, ok := retryCount(item); ok {
		lr.count = c + 1
	}
	lr.failed = bytes.Contains(item, []byte(`"error_class":`))
	return lr
}

// retryCount reads the item's top-level retry_count without parsing the
// whole item (a nested one in the args could only widen the window).
func retryCount(item []byte) (int, bool) {
	i := bytes.Index(item, []byte(`"retry_count":`))
	if i < 0 {
		return 0, false
	}
	rest := bytes.TrimLeft(item[i+len(`"retry_count":`):], " ")
	end := bytes.IndexAny(rest, ",} ")
	if end < 0 {
		return 0, false
	}
	n, err := strconv.Atoi(string(rest[:end]))
	return n, err == nil && n >= 0
}

// exactWindow is the base itself (within the databases' microseconds and
// a score's float): where a scheduled push or an earlier pass put the
// entry.
func exactWindow(l *lookupRow) redisfind.Window {
	return redisfind.Window{Lo: l.base.Add(-time.Millisecond), Hi: l.base.Add(time.Millisecond), JID: l.rw.JobID}
}

func retryWindow(l *lookupRow) redisfind.Window {
	c := float64(l.count)
	maxDelay := time.Duration(math.Pow(c, 4)+15+10*(c+1)) * time.Second
	return redisfind.Window{Lo: l.base.Add(-windowSlack), Hi: l.base.Add(maxDelay + windowSlack), JID: l.rw.JobID}
}

func deadWindow(l *lookupRow) redisfind.Window {
	return redisfind.Window{Lo: l.base.Add(-windowSlack), Hi: l.base.Add(5 * windowSlack), JID: l.rw.JobID}
}

// windows are the windows win gives rows.
func windows(rows []*lookupRow, win func(*lookupRow) redisfind.Window) []redisfind.Window {
	out := make([]redisfind.Window, len(rows))
	for i, l := range rows {
		out[i] = win(l)
	}
	return out
}
