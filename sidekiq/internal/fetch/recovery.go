package fetch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/monoclock"
	"github.com/gojob/gojob/internal/procstat"
	"github.com/gojob/gojob/internal/redisreply"
)

// DefaultRecoveryLimit is how many times a job may be recovered from the
// in-progress list of a dead process before it is taken for a poison pill
// (the gem's max_retries_after_interruption).
const DefaultRecoveryLimit = 3

// DefaultRecoveryInterval is the time between orphan recovery passes.
const DefaultRecoveryInterval = 15 * time.Second

// recoveryCountTTL keeps a job's recovery count for a week.
const recoveryCountTTL = 7 * 24 * 3600

// scanInterval is how often, cluster-wide (a lease), one process SCANs the
// keyspace for in-progress lists that gojob's registry does not know
// (Ruby's gem does not register its lists).
const scanInterval = 10 * time.Minute

// firstScanAfter is how long after its start a process may first SCAN:
// a SCAN's cost grows with the keyspace, and a process's start-up sends
// the same commands whatever Redis holds. The registered lists (all of
// gojob's) are recovered from the first pass.
var firstScanAfter = time.Minute

// PoisonPillError is the failure recorded on a job that was in flight in a
// process that died Count times: it goes to the dead set instead of killing
// process after process.
type PoisonPillError struct {
	Count int
	Limit int
}

func (e *PoisonPillError) Error() string {
	return fmt.Sprintf("job was running in a process that died %d times (reliable fetch recovers a job at most %d times); moved to the dead set instead of being run again", e.Count, e.Limit-1)
}

// ErrorClass is the error_class of the dead-set entry.
func (e *PoisonPillError) ErrorClass() string { return "Gojob::PoisonPill" }

// reliableLife is what a reliable fetch does for as long as its process
// lives: the heartbeats of its list identities, the recovery of dead
// processes' lists, and the sweep of its own lists after a failed round
// trip.
type reliableLife struct {
	cfg      *Config
	ids      *idents
	hbValue  string
	bootID   string
	limit    int
	interval time.Duration

	// Set by the fetch once its slots exist.
	holders      func() map[string]map[string]int
	inUse        func() map[*listIdent]bool
	dropped      func() int64
	waitingSince func() int64
	// blocking returns the lists the blockers are blocked on (idle.go).
	blocking func() map[string]bool

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once

	// sweepDelay is the time between the two looks of sweepOwn.
	sweepDelay time.Duration
	// sweep state (run goroutine only)
	sweptDropped int64
	candidates   map[string]map[string]int
	candidatesAt time.Time
	lastScan     time.Time
	// expiredLogged: the renewal that found heartbeats gone was logged.
	expiredLogged bool

	// master is the run_id of the Redis the fetch reaches (master.go);
	// moved, set by the fetch, ends the epoch when it changes, and changed
	// tells the run goroutine.
	master  masterWatch
	moved   func()
	changed chan struct{}
	// quickUntil: after a change of master, the sweep's second look comes
	// after quickSweepDelay (run goroutine only).
	quickUntil time.Time

	lostMu sync.Mutex
	lost   map[string]bool // list identities whose lists Redis lost
}

func newReliableLife(cfg *Config, ids *idents) *reliableLife {
	l := &reliableLife{
		cfg:      cfg,
		ids:      ids,
		hbValue:  heartbeatValue(),
		bootID:   procstat.BootID(),
		limit:    cfg.RecoveryLimit,
		interval: cfg.RecoveryInterval,
		// A round in flight is answered within stallAfter unless Redis
		// stalls, which the second look checks.
		sweepDelay: stallAfter + 5*time.Second,
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
		changed:    make(chan struct{}, 1),
		moved:      func() {},
		lost:       map[string]bool{},
	}
	if l.limit <= 0 {
		l.limit = DefaultRecoveryLimit
	}
	if l.interval <= 0 {
		l.interval = DefaultRecoveryInterval
	}
	l.lastScan = time.Now().Add(firstScanAfter - scanInterval)
	cfg.Clock = monoclock.Or(cfg.Clock)
	return l
}

var errStopping = errors.New("stopping")

// sweepSoon sweeps the own lists between passes after a failed round trip
// (a move whose reply was lost leaves a job no slot knows): the first
// look once Redis answers again, the second sweepDelay later, rather than
// at the passes' pace. The job waits about sweepDelay, not a minute.
func (l *reliableLife) sweepSoon() {
	if l.holders == nil || l.cfg.Outage.Down() || (l.dropped() == l.sweptDropped && l.candidates == nil) {
		return
	}
	if err := l.sweepOwn(false); err != nil {
		l.cfg.Logger.Debug().Err(err).Str("component", "recovery").Msg("sweep of the own lists failed; the next pass tries again")
	}
}

// renew writes the heartbeats of the created identities and reports
// whether one was gone; with info, it also returns the run_id of the
// Redis it wrote to. ok is false when Redis could not be reached.
func (l *reliableLife) renew(info bool) (gone bool, runID string, ok bool) {
	var live []*listIdent
	for _, li := range l.ids.snapshot() {
		l.ids.mu.Lock()
		created := li.created
		l.ids.mu.Unlock()
		if created {
			live = append(live, li)
		}
	}
	sent := time.Now()
	if len(live) == 0 && !info {
		l.ids.confirm(sent)
		return false, "", true
	}
	ctx, cancel := ctxTimeout(stallAfter)
	defer cancel()
	conn, err := l.cfg.Pool.GetContext(ctx)
	if err != nil {
		l.cfg.Outage.Failed(err)
		return false, "", false
	}
	defer conn.Close()
	for _, li := range live {
		conn.Send("SET", li.hbKey, l.hbValue, "EX", contract.HeartbeatTTL, "GET")
	}
	if info {
		conn.Send("INFO", "server")
	}
	replies, err := redis.Values(conn.Do(""))
	if err != nil {
		l.cfg.Outage.Failed(err)
		return false, "", false
	}
	if info {
		if s, err := redis.String(replies[len(replies)-1], nil); err == nil {
			runID = runIDOf(s)
		}
		replies = replies[:len(replies)-1]
	}
	for _, r := range replies {
		switch r.(type) {
		case nil:
			gone = true
		case redis.Error:
			// SET … GET needs Redis 6.2: a plain SET cannot tell.
			if gone, err = l.beatPlain(conn, live); err != nil {
				l.cfg.Outage.Failed(err)
				return false, "", false
			}
			l.ids.confirm(sent)
			return gone, runID, true
		}
	}
	if gone {
		l.ids.bump()
	}
	l.ids.confirm(sent)
	return gone, runID, true
}

// beatPlain renews the heartbeats on a Redis without SET … GET (before
// 6.2), reading them first: a key gone ends the epoch all the same, and
// is reported.
func (l *reliableLife) beatPlain(conn redis.Conn, live []*listIdent) (bool, error) {
	for _, li := range live {
		conn.Send("EXISTS", li.hbKey)
		conn.Send("SET", li.hbKey, l.hbValue, "EX", contract.HeartbeatTTL)
	}
	replies, err := redisreply.Pipeline(context.Background(), conn)
	if err != nil {
		return false, err
	}
	for i := 0; i < len(replies); i += 2 {
		if n, _ := redis.Int(replies[i], nil); n == 0 {
			l.ids.bump()
			return true, nil
		}
	}
	return false, nil
}

// notOwned logs a finished job that was no longer in its in-progress list
// (not when Redis lost that list with its data: that was logged once).
func (l *reliableLife) notOwned(list string, raw []byte) {
	if _, identity, ok := contract.ParseWorkingListKey(list); ok && l.wasLost(identity) {
		return
	}
	l.cfg.Logger.Warn().Str("component", "fetch").Str("list", list).Bytes("payload", raw).
		Msg("a finished job was no longer in this process's in-progress list: another process recovered it and runs it again")
}

// own reports whether an identity is one of this process's list
// identities.
func (l *reliableLife) own(identity string) bool {
	return strings.HasPrefix(identity, l.cfg.Identity)
}

// sweepOwn requeues the jobs of this process's own lists that no slot
// holds: jobs moved by a round whose connection failed before its reply
// was read (a stalled or vanished Redis may run it later). An entry must
// be seen unheld twice, stallAfter apart, with no reply outstanding from
// before the first look, so that a move still in flight is never taken
// for an orphan. final (at Close, no slot left) requeues at once. Then it
// forgets the identities of past epochs that no slot uses and whose lists
// are empty.
func (l *reliableLife) sweepOwn(final bool) error {
	now := time.Now()
	if !final {
		d := l.dropped()
		if d == l.sweptDropped && l.candidates == nil {
			return l.retire()
		}
		delay := l.sweepDelay
		if now.Before(l.quickUntil) {
			delay = quickSweepDelay
		}
		if l.candidates != nil && now.Sub(l.candidatesAt) < delay {
			return nil
		}
	}
	// A list a blocker is blocked on, before the look or after the
	// holders, may hold a job its blocker has not read yet.
	skip := map[string]bool{}
	if l.blocking != nil && !final {
		skip = l.blocking()
	}
	entries, err := l.ownEntries(l.ids.allLists())
	if err != nil {
		return err
	}
	unheld := entries
	if l.holders != nil && !final {
		unheld = minus(entries, l.holders())
	}
	if l.blocking != nil && !final {
		for k := range l.blocking() {
			skip[k] = true
		}
		for k := range skip {
			delete(unheld, k)
		}
	}
	if !final {
		if l.candidates == nil {
			l.candidates, l.candidatesAt = unheld, now
			l.sweptDropped = l.dropped()
			return nil
		}
		if w := l.waitingSince(); w != 0 && w < l.candidatesAt.UnixNano() {
			return nil // a reply from before the first look is outstanding
		}
		unheld = intersect(l.candidates, unheld)
		l.candidates = nil
	}
	var units []Unit
	for list, raws := range unheld {
		queue, _, _ := contract.ParseWorkingListKey(list)
		for raw, n := range raws {
			for range n {
				units = append(units, Unit{Queue: queue, Raw: []byte(raw), reliableUnit: reliableUnit{list: list}})
			}
		}
	}
	if len(units) > 0 {
		l.cfg.Logger.Warn().Str("component", "fetch").Int("jobs", len(units)).Bool("at_stop", final).
			Msg("jobs in this process's in-progress lists that no slot runs (a failed round trip's move); back to their queues")
		if err := requeue(l.cfg, units); err != nil {
			return err
		}
	}
	if final {
		return nil
	}
	return l.retire()
}

// retire forgets the identities of past epochs that no slot uses and
// whose lists are empty: their heartbeats go and their lists leave the
// registry.
func (l *reliableLife) retire() error {
	var old []*listIdent
	use := l.inUse()
	for _, li := range l.ids.snapshot() {
		if !l.ids.current(li) && !use[li] {
			old = append(old, li)
		}
	}
	if len(old) == 0 {
		return nil
	}
	var lists []string
	l.ids.mu.Lock()
	for _, li := range old {
		lists = append(lists, l.ids.keysOfLocked(li)...)
	}
	l.ids.mu.Unlock()
	entries, err := l.ownEntries(lists)
	if err != nil {
		return err
	}
	gone := map[*listIdent]bool{}
	err = l.cfg.Writes.Do(func(conn redis.Conn) error {
		for _, li := range old {
			l.ids.mu.Lock()
			empty := true
			args := []any{contract.KeyWorkingLists}
			for _, k := range l.ids.keysOfLocked(li) {
				if len(entries[k]) > 0 {
					empty = false
				}
			}
			for _, k := range li.lists {
				args = append(args, k)
			}
			l.ids.mu.Unlock()
			if !empty {
				continue
			}
			gone[li] = true
			conn.Send("DEL", li.hbKey)
			if len(args) > 1 {
				conn.Send("SREM", args...)
			}
		}
		_, err := redisreply.Pipeline(context.Background(), conn)
		return err
	})
	if err != nil {
		return err
	}
	l.ids.drop(gone)
	l.lostMu.Lock()
	for li := range gone {
		delete(l.lost, li.id)
	}
	l.lostMu.Unlock()
	return nil
}

// ownEntries reads lists: by list, the jobs in it and how many times each.
func (l *reliableLife) ownEntries(lists []string) (map[string]map[string]int, error) {
	out := map[string]map[string]int{}
	if len(lists) == 0 {
		return out, nil
	}
	replies, err := l.pipeline(func(conn redis.Conn) {
		for _, k := range lists {
			conn.Send("LRANGE", k, 0, -1)
		}
	})
	if err != nil {
		return nil, err
	}
	for i, r := range replies {
		raws, err := redis.ByteSlices(r, nil)
		if err != nil {
			return nil, err
		}
		for _, raw := range raws {
			add(out, lists[i], raw)
		}
	}
	return out, nil
}

func minus(a, b map[string]map[string]int) map[string]map[string]int {
	out := map[string]map[string]int{}
	for list, raws := range a {
		for raw, n := range raws {
			if n -= b[list][raw]; n > 0 {
				if out[list] == nil {
					out[list] = map[string]int{}
				}
				out[list][raw] = n
			}
		}
	}
	return out
}

func intersect(a, b map[string]map[string]int) map[string]map[string]int {
	out := map[string]map[string]int{}
	for list, raws := range a {
		for raw, n := range raws {
			if n = min(n, b[list][raw]); n > 0 {
				if out[list] == nil {
					out[list] = map[string]int{}
				}
				out[list][raw] = n
			}
		}
	}
	return out
}

// close sweeps the own lists one last time, then ends the heartbeats and
// the recovery: the heartbeat keys are deleted, so that whatever is left
// in the lists (a write that failed, a stalled move that Redis runs later)
// is recovered by other processes at their next pass.
func (l *reliableLife) close() {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.done
	if err := l.sweepOwn(true); err != nil {
		l.cfg.Logger.Error().Err(err).Str("component", "fetch").Msg("could not sweep the in-progress lists at stop; other processes recover them")
	}
	all := l.ids.snapshot()
	lists := l.ids.allLists()
	if len(all) == 0 {
		return
	}
	err := l.cfg.Writes.Do(func(conn redis.Conn) error {
		args := []any{contract.KeyWorkingLists}
		if len(lists) > 0 {
			for _, k := range lists {
				conn.Send("LLEN", k)
			}
			lens, err := redis.Ints(conn.Do(""))
			if err != nil {
				return err
			}
			for i, n := range lens {
				if n == 0 {
					args = append(args, lists[i])
				}
			}
		}
		for _, li := range all {
			conn.Send("DEL", li.hbKey)
		}
		if len(args) > 1 {
			conn.Send("SREM", args...)
		}
		_, err := redisreply.Pipeline(context.Background(), conn)
		return err
	})
	if err != nil {
		l.cfg.Logger.Error().Err(err).Str("component", "fetch").Msg("could not remove the reliable-fetch heartbeats at stop; they expire by itself")
	}
}

// heartbeatInterval is how often the reliable-fetch heartbeats are
// renewed; they expire after contract.HeartbeatTTL (60 s), so a live process
// misses five renewals before it could be taken for dead.
const heartbeatInterval = 10 * time.Second

// heartbeatValue is the value of the reliable-fetch heartbeat keys. Ruby's
// gem only checks that a key exists; gojob reads the boot id and the
// process's start time to tell, on the same host, that a predecessor whose
// key has not expired yet is gone.
func heartbeatValue() string {
	return "gojob " + procstat.BootID() + " " + procstat.StartTime(os.Getpid())
}

// wasLost reports whether Redis lost the lists of a list identity.
func (l *reliableLife) wasLost(identity string) bool {
	l.lostMu.Lock()
	defer l.lostMu.Unlock()
	return l.lost[identity]
}
