package fetch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/internal/procstat"
	"github.com/gojob/gojob/internal/redisreply"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
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
	}
	if l.limit <= 0 {
		l.limit = DefaultRecoveryLimit
	}
	if l.interval <= 0 {
		l.interval = DefaultRecoveryInterval
	}
	cfg.Clock = clock.Or(cfg.Clock)
	return l
}

// start runs the heartbeats and the recovery in the background.
func (l *reliableLife) start(*redisx.Retrier) error {
	go l.run()
	return nil
}

func (l *reliableLife) run() {
	defer close(l.done)
	beat := time.NewTicker(heartbeatInterval)
	defer beat.Stop()
	age := time.NewTicker(time.Second)
	defer age.Stop()
	next := time.NewTimer(0) // the first pass at once: this host's predecessors
	defer next.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-beat.C:
			l.beat()
		case <-age.C:
			l.ids.age()
			l.sweepSoon()
		case <-next.C:
			if err := l.pass(l.stop); err != nil && !errors.Is(err, errStopping) {
				l.cfg.Logger.Warn().Err(err).Str("component", "recovery").Msg("orphan recovery pass failed")
			}
			next.Reset(l.interval/2 + rand.N(l.interval))
		}
	}
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

// beat renews the heartbeats of the list identities. A renewal that finds
// a key gone means other processes may have taken this one for dead and
// recovered its jobs: the epoch ends (no position is trusted any more),
// and the identities of the new epoch get keys of their own.
func (l *reliableLife) beat() {
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
	if len(live) == 0 {
		l.ids.confirm(sent)
		return
	}
	ctx, cancel := ctxTimeout(stallAfter)
	defer cancel()
	conn, err := l.cfg.Pool.GetContext(ctx)
	if err != nil {
		l.cfg.Outage.Failed(err)
		return
	}
	defer conn.Close()
	for _, li := range live {
		conn.Send("SET", li.hbKey, l.hbValue, "EX", wire.HeartbeatTTL, "GET")
	}
	replies, err := redis.Values(conn.Do(""))
	if err != nil {
		l.cfg.Outage.Failed(err)
		return
	}
	gone := false
	for _, r := range replies {
		switch r.(type) {
		case nil:
			gone = true
		case redis.Error:
			// SET … GET needs Redis 6.2: a plain SET cannot tell.
			if err := l.beatPlain(conn, live); err != nil {
				l.cfg.Outage.Failed(err)
				return
			}
			l.ids.confirm(sent)
			return
		}
	}
	if gone {
		l.ids.bump()
		if !l.expiredLogged {
			l.expiredLogged = true
			l.cfg.Logger.Error().Str("component", "fetch").Str("identity", l.cfg.Identity).
				Msg("this process's reliable-fetch heartbeat had expired (was it stopped for a minute?); other processes may have recovered, and will run again, the jobs it is running")
		}
		return
	}
	l.expiredLogged = false
	l.ids.confirm(sent)
}

// beatPlain renews the heartbeats on a Redis without SET … GET (before
// 6.2), reading them first: a key gone ends the epoch all the same.
func (l *reliableLife) beatPlain(conn redis.Conn, live []*listIdent) error {
	for _, li := range live {
		conn.Send("EXISTS", li.hbKey)
		conn.Send("SET", li.hbKey, l.hbValue, "EX", wire.HeartbeatTTL)
	}
	replies, err := redisreply.Pipeline(context.Background(), conn)
	if err != nil {
		return err
	}
	for i := 0; i < len(replies); i += 2 {
		if n, _ := redis.Int(replies[i], nil); n == 0 {
			l.ids.bump()
			return nil
		}
	}
	return nil
}

// notOwned logs a finished job that was no longer in its in-progress list.
func (l *reliableLife) notOwned(list string, raw []byte) {
	l.cfg.Logger.Warn().Str("component", "fetch").Str("list", list).Bytes("payload", raw).
		Msg("a finished job was no longer in this process's in-progress list: another process recovered it and runs it again")
}

// own reports whether an identity is one of this process's list
// identities.
func (l *reliableLife) own(identity string) bool {
	return strings.HasPrefix(identity, l.cfg.Identity)
}

// pass is one recovery pass: the lists of gojob's registry, the keyspace
// SCAN when it is due (the gem's lists are not registered), and this
// process's own lists when a round trip failed. It ends early when stop
// (nil: never) is closed.
func (l *reliableLife) pass(stop <-chan struct{}) error {
	lists, err := l.candidateLists()
	if err != nil {
		return err
	}
	byOwner := map[string][]string{}
	var owners []string
	for _, key := range lists {
		_, identity, ok := wire.ParseWorkingListKey(key)
		if !ok || l.own(identity) {
			continue
		}
		if byOwner[identity] == nil {
			owners = append(owners, identity)
		}
		byOwner[identity] = append(byOwner[identity], key)
	}
	dead, err := l.gone(owners)
	if err != nil {
		return err
	}
	var errs []error
	for _, identity := range owners {
		force, ok := dead[identity]
		if !ok {
			continue
		}
		for _, key := range byOwner[identity] {
			select {
			case <-stop:
				return errStopping
			default:
			}
			if _, err := l.recoverList(key, force); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", key, err))
			}
		}
	}
	if l.holders != nil {
		if err := l.sweepOwn(false); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// gone returns the owners among identities that are gone, each with
// whether it is known gone although its keys have not expired yet (same
// host, its pid ended): one pipeline for all of them.
func (l *reliableLife) gone(identities []string) (map[string]bool, error) {
	out := map[string]bool{}
	if len(identities) == 0 {
		return out, nil
	}
	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	conn, err := l.cfg.Pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	for _, id := range identities {
		conn.Send("GET", wire.ReliableHeartbeatKey(id))
		conn.Send("EXISTS", id)
	}
	replies, err := redisreply.Pipeline(ctx, conn)
	if err != nil {
		return nil, err
	}
	for i, id := range identities {
		if hb, _ := redis.String(replies[2*i], nil); hb != "" {
			if l.sameHostGone(id, hb) {
				out[id] = true
			}
			continue
		}
		if n, _ := redis.Int(replies[2*i+1], nil); n == 1 {
			continue // its Sidekiq heartbeat is alive
		}
		out[id] = false
	}
	return out, nil
}

// candidateLists returns the registered in-progress lists and, once per
// scanInterval cluster-wide, those a SCAN finds.
func (l *reliableLife) candidateLists() ([]string, error) {
	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	conn, err := l.cfg.Pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	lists, err := redis.Strings(redis.DoContext(conn, ctx, "SMEMBERS", wire.KeyWorkingLists))
	if err != nil {
		return nil, err
	}
	if time.Since(l.lastScan) < scanInterval {
		return lists, nil
	}
	l.lastScan = time.Now()
	ok, err := redis.DoContext(conn, ctx, "SET", wire.KeyRecoveryScanLock, l.cfg.Identity, "NX", "EX", int(scanInterval.Seconds()))
	if err != nil || ok == nil {
		return lists, err
	}
	seen := map[string]bool{}
	for _, k := range lists {
		seen[k] = true
	}
	cursor := "0"
	for {
		vals, err := redis.Values(redis.DoContext(conn, ctx, "SCAN", cursor, "MATCH", wire.WorkingListPattern, "COUNT", 1000))
		if err != nil {
			return lists, err
		}
		if len(vals) != 2 {
			return lists, errors.New("unexpected SCAN reply")
		}
		cursor, _ = redis.String(vals[0], nil)
		keys, _ := redis.Strings(vals[1], nil)
		for _, k := range keys {
			if !seen[k] {
				seen[k] = true
				lists = append(lists, k)
			}
		}
		if cursor == "0" {
			return lists, nil
		}
	}
}

// recoverList moves the jobs of an in-progress list whose owner is gone
// (force: known gone though its keys live) back to their queue (or, poison
// pills, to the dead set). It returns how many it moved. The recover
// script checks the owner's keys again for each job.
func (l *reliableLife) recoverList(key string, force bool) (int, error) {
	queue, identity, ok := wire.ParseWorkingListKey(key)
	if !ok {
		return 0, nil
	}
	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	conn, err := l.cfg.Pool.GetContext(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	hbKey := wire.ReliableHeartbeatKey(identity)
	jobs, err := redis.ByteSlices(redis.DoContext(conn, ctx, "LRANGE", key, 0, -1))
	if err != nil {
		return 0, err
	}
	if len(jobs) == 0 {
		// An empty list is no key: drop a stale registry entry.
		_, err := redis.DoContext(conn, ctx, "SREM", wire.KeyWorkingLists, key)
		return 0, err
	}
	moved, dead := 0, 0
	// From the head (the most recently fetched) to the tail: each RPUSH
	// goes to the pop end, so the oldest is popped first, before any job
	// pushed meanwhile.
	for _, raw := range jobs {
		n, poisoned, err := l.recoverJob(ctx, conn, key, hbKey, identity, queue, raw, force)
		if err != nil {
			return moved, err
		}
		if n < 0 {
			l.cfg.Logger.Info().Str("component", "recovery").Str("list", key).Msg("the owner of an in-progress list came back; leaving it alone")
			break
		}
		moved += n
		if poisoned {
			dead++
		}
	}
	l.cfg.Stats.add(moved-dead, dead)
	if moved > 0 {
		l.cfg.Logger.Warn().Str("component", "recovery").Str("process", identity).Str("queue", queue).
			Int("requeued", moved-dead).Int("poison_pills", dead).Bool("same_host", force).
			Msg("recovered the jobs of a process that is gone")
	}
	return moved, nil
}

// recoverJob runs the recover script for one job.
func (l *reliableLife) recoverJob(ctx context.Context, conn redis.Conn, list, hbKey, identity, queue string, raw []byte, force bool) (int, bool, error) {
	job, perr := wire.ParseJob(raw)
	jid := ""
	interrupted := 0
	if perr == nil {
		jid = job.JID()
		if v, ok := job.Get("interrupted_count"); ok {
			if n, ok := v.Int(); ok {
				interrupted = int(n)
			}
		}
	}
	counter := wire.RecoveryCountKey(jid)
	count := interrupted + 1
	if jid != "" {
		prev, err := redis.Int(redis.DoContext(conn, ctx, "GET", counter))
		if err != nil && !errors.Is(err, redis.ErrNil) {
			return 0, false, err
		}
		count += prev
	}
	mode, deadScore, deadPayload, cutoff, maxJobs := "requeue", "", []byte(nil), "", ""
	var pill *PoisonPillError
	if jid != "" && count >= l.limit {
		pill = &PoisonPillError{Count: count, Limit: l.limit}
		now := l.cfg.Clock.Now()
		mode = "dead"
		deadScore = wire.Score(now)
		deadPayload = poisonPayload(job, pill, now, l.cfg.Format.Version())
		lim := wire.MorgueLimits{}.OrDefault()
		cutoff = wire.FormatScore(wire.EpochSeconds(now) - lim.Timeout.Seconds())
		maxJobs = strconv.Itoa(lim.MaxJobs)
	}
	countIt := "0"
	if jid != "" {
		countIt = "1"
	}
	forced := "0"
	if force {
		forced = "1"
	}
	n, err := redis.Int(recoverScript.DoContext(ctx, conn, list, hbKey, identity, wire.QueueKey(queue), counter,
		wire.KeyDead, wire.KeyWorkingLists, raw, mode, forced, countIt, recoveryCountTTL,
		deadScore, deadPayload, cutoff, maxJobs))
	if err != nil {
		return 0, false, err
	}
	if n == 1 && pill != nil {
		l.cfg.Logger.Error().Str("component", "recovery").Str("jid", jid).Str("class", job.Class()).Int("recoveries", count).
			Msg("poison pill: the job was running each time its process died; moved to the dead set")
		if l.cfg.Died != nil {
			dj, _ := wire.ParseJob(deadPayload)
			l.cfg.Died(dj, pill)
		}
	}
	return n, n == 1 && pill != nil, nil
}

// poisonPayload is the dead-set entry of a poison pill: the job with the
// error fields a failure adds (docs/sidekiq-wire.md#retries).
func poisonPayload(job *wire.Job, pill *PoisonPillError, now time.Time, v wire.Version) []byte {
	j := job.Clone()
	j.Set("error_message", rubyjson.StringValue(pill.Error()))
	j.Set("error_class", rubyjson.StringValue(pill.ErrorClass()))
	if _, ok := j.RetryCount(); ok {
		j.SetTime("retried_at", now, v)
	} else {
		j.SetTime("failed_at", now, v)
	}
	return j.Encode()
}

// sameHostGone reports whether the owner of a live-looking heartbeat is a
// process of this machine (same boot) that is gone: no process with its
// start time has that pid any more. That covers a restarted container whose
// new process got the old pid (its start time differs), and leaves alone
// another server of this very process (same pid, same start time).
func (l *reliableLife) sameHostGone(identity, hb string) bool {
	f := strings.Fields(hb)
	if len(f) != 3 || f[0] != "gojob" || l.bootID == "" || f[1] != l.bootID {
		return false
	}
	parts := strings.Split(identity, ":")
	if len(parts) != 3 {
		return false
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil {
		return false
	}
	if identity == l.cfg.Identity {
		return false
	}
	return procstat.StartTime(pid) != f[2]
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
		if l.candidates != nil && now.Sub(l.candidatesAt) < l.sweepDelay {
			return nil
		}
	}
	entries, err := l.ownEntries(l.ids.allLists())
	if err != nil {
		return err
	}
	unheld := entries
	if l.holders != nil && !final {
		unheld = minus(entries, l.holders())
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
		queue, _, _ := wire.ParseWorkingListKey(list)
		for raw, n := range raws {
			for range n {
				units = append(units, Unit{Queue: queue, Raw: []byte(raw), list: list})
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
		for _, k := range li.lists {
			lists = append(lists, k)
		}
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
			args := []any{wire.KeyWorkingLists}
			for _, k := range li.lists {
				if len(entries[k]) > 0 {
					empty = false
				}
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
	return nil
}

// ownEntries reads lists: by list, the jobs in it and how many times each.
func (l *reliableLife) ownEntries(lists []string) (map[string]map[string]int, error) {
	out := map[string]map[string]int{}
	if len(lists) == 0 {
		return out, nil
	}
	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	conn, err := l.cfg.Pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	for _, k := range lists {
		conn.Send("LRANGE", k, 0, -1)
	}
	replies, err := redisreply.Pipeline(ctx, conn)
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
		args := []any{wire.KeyWorkingLists}
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
