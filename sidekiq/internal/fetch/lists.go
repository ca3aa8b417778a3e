package fetch

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gojob/gojob/internal/contract"
)

// The reliable fetch's in-progress lists. Each slot moves its jobs into
// lists of its own, one per queue, named in the gitlab-sidekiq-fetcher
// gem's layout (working:queue:<q>:<identity>) after a list identity
// "<host>:<pid>:<process nonce><sequence>" that the slot alone uses. A
// slot knows exactly what its lists hold and in which order (its mirror:
// the jobs it took into each, oldest first), so it acknowledges the oldest
// job of a list by position, `LTRIM list 0 -2`, without sending the job's
// bytes back; any other job leaves by value, `LREM list -1 job`.
//
// A position is only right while nobody else has touched the list, so a
// slot acknowledges by position only while both of these hold, and by
// value otherwise:
//
//   - its identity belongs to the current epoch. Any failed round trip of
//     the fetch (a move whose reply was lost may have put a job in a list
//     that no mirror knows; a lost LTRIM may or may not have run; a
//     restarted Redis has lost or rolled back its lists) ends the epoch:
//     from then on every slot takes into lists of a fresh identity, and
//     the jobs still in the old lists leave by value. The sweep of the own
//     lists finds what no mirror knows.
//   - the identity's heartbeat was confirmed within positionFresh. Other
//     processes recover a list only when its heartbeat key has expired, 60
//     s after the last renewal; every renewal reads the previous value,
//     and one that finds a key gone ends the epoch, so that jobs taken
//     after a recovery never share a list with stale positions.
//
// The keys stay the gem's, so Ruby processes using it recover gojob's
// orphans and gojob recovers theirs: every list identity has its
// reliable-fetcher-heartbeat key, renewed every heartbeatInterval.

// positionFresh is how recently the heartbeats must have been confirmed
// for a slot to acknowledge by position, and for the takers to move jobs:
// well inside the heartbeat's 60 s, so that no other process may have
// taken the lists for orphans.
const positionFresh = 20 * time.Second

// listIdent is one identity a slot's lists are named after.
type listIdent struct {
	id    string // "<host>:<pid>:<hex>"
	hbKey string
	epoch uint64
	// lists are its lists registered in contract.KeyWorkingLists, by queue
	// key (the taker that first moves into one registers it in the same
	// round trip, before the move).
	lists map[string]string
	// created: its heartbeat was written (renewals include it from then).
	created bool
}

// listKey returns the identity's list for queue key q.
func (id *listIdent) listKey(q string) string {
	return contract.WorkingListKey(contract.QueueName(q), id.id)
}

// idents are a fetch's list identities and its epoch.
type idents struct {
	base  string // "<host>:<pid>:<nonce>"
	epoch atomic.Uint64
	// confirmed is when the last renewal that found every heartbeat in
	// place was sent (unix nanoseconds), and stale whether that is longer
	// ago than positionFresh (updated every second: fresh is asked for
	// every job).
	confirmed atomic.Int64
	stale     atomic.Bool

	// queues are the fetch's queue keys: an identity may have a list for
	// each (see keysOfLocked).
	queues []string

	mu   sync.Mutex
	next uint64
	live []*listIdent
}

func newIdents(identity string) *idents {
	ids := &idents{base: identity}
	ids.confirmed.Store(time.Now().UnixNano())
	return ids
}

// fresh reports whether the heartbeats were confirmed recently enough for
// positions and moves.
func (ids *idents) fresh() bool { return !ids.stale.Load() }

// confirm records a renewal sent at t that found every heartbeat.
func (ids *idents) confirm(t time.Time) {
	ids.confirmed.Store(t.UnixNano())
	ids.stale.Store(false)
}

// age updates stale.
func (ids *idents) age() {
	ids.stale.Store(time.Since(time.Unix(0, ids.confirmed.Load())) >= positionFresh)
}

// create returns a new identity of the current epoch.
func (ids *idents) create() *listIdent {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	ids.next++
	id := fmt.Sprintf("%s%06x", ids.base, ids.next)
	li := &listIdent{id: id, hbKey: contract.ReliableHeartbeatKey(id), epoch: ids.epoch.Load(), lists: map[string]string{}}
	ids.live = append(ids.live, li)
	return li
}

// bump ends the epoch: no slot acknowledges by position in the lists of
// the identities made so far.
func (ids *idents) bump() { ids.epoch.Add(1) }

// current reports whether li belongs to the current epoch.
func (ids *idents) current(li *listIdent) bool { return li.epoch == ids.epoch.Load() }

// snapshot returns the live identities and their registered lists.
func (ids *idents) snapshot() []*listIdent {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	return slices.Clone(ids.live)
}

// allLists returns every list the live identities may have: those
// registered, and one per queue for each identity. A move whose reply was
// lost (a failover, a restart) may have put a job in a list that was
// never confirmed registered; such a job is this process's to give back,
// and no other process recovers it while the identity's heartbeat lives.
func (ids *idents) allLists() []string {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for _, li := range ids.live {
		for _, l := range ids.keysOfLocked(li) {
			if !seen[l] {
				seen[l] = true
				out = append(out, l)
			}
		}
	}
	slices.Sort(out)
	return out
}

// keysOfLocked returns the lists li may have (ids.mu held).
func (ids *idents) keysOfLocked(li *listIdent) []string {
	var out []string
	for _, l := range li.lists {
		out = append(out, l)
	}
	for _, q := range ids.queues {
		if li.lists[q] == "" {
			out = append(out, li.listKey(q))
		}
	}
	return out
}

// drop forgets retired identities (not of the current epoch) that no
// slot uses and whose lists the caller found empty.
func (ids *idents) drop(gone map[*listIdent]bool) {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	ids.live = slices.DeleteFunc(ids.live, func(li *listIdent) bool { return gone[li] })
}
