package fetch

import (
	"strings"
	"sync"
	"time"
)

// A change of master. After a Sentinel promotion, or a Redis restart, the
// fetch's connections reach a Redis whose lists may differ from what the
// slots' mirrors say: a move or an acknowledgement that had not reached
// the promoted replica, or every list gone with a restart that lost the
// data. Each Redis server has a run_id (INFO server) of its own, new at
// each start, so the fetch reads it on every new connection of its takers
// and blockers, and with every heartbeat renewal. When it changes:
//
//   - the epoch ends at once: no position is trusted, the slots take into
//     lists of fresh identities, and acknowledgements go by value;
//   - the heartbeats are written again, and the renewal tells whether
//     they were there: gone means Redis lost its data (the jobs running
//     now are in no list any more; they finish, and nothing is left to
//     give back), present means a promoted replica (or a restart that
//     kept its data);
//   - this process's own lists are swept soon, with a short second look
//     (quickSweepDelay): a job in them that no slot holds (its
//     acknowledgement had not reached the replica, or a move's reply was
//     lost) goes back to its queue and runs again; a job a slot holds is
//     acknowledged there when it finishes, or given back at a stop;
//   - the log says which of the two happened, once.
//
// Commands in flight on the old master cannot reach the new one, so the
// second look need not wait out a stall (sweepDelay); moves in flight on
// the new master are still waited for (waitingSince, blockingLists).

// quickSweepDelay is the second look's delay after a change of master.
const quickSweepDelay = time.Second

// renewFor is how long a change of master seen on a fetch connection
// tries the renewal that tells what happened, before the next heartbeat
// renewal does.
const renewFor = 3 * time.Second

// quickSweepFor is how long after a change the sweeps use it.
const quickSweepFor = 30 * time.Second

// masterWatch is the run_id the fetch last saw.
type masterWatch struct {
	mu      sync.Mutex
	runID   string
	prev    string
	pending bool // changed, not yet reported
}

// observe records the run_id of the Redis a connection reached and
// reports whether it differs from the one seen before.
func (m *masterWatch) observe(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if id == m.runID {
		return false
	}
	old := m.runID
	m.runID = id
	if old == "" {
		return false
	}
	m.prev, m.pending = old, true
	return true
}

// takePending reports a change not yet reported, once.
func (m *masterWatch) takePending() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pending
	m.pending = false
	return p
}

func (m *masterWatch) ids() (prev, cur string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.prev, m.runID
}

// runIDOf returns the run_id of an INFO server reply.
func runIDOf(info string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(line, "run_id:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
