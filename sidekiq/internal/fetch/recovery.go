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
// lives: the heartbeat that tells other processes it is alive, the
// registry entries of its in-progress lists, the recovery of dead
// processes' lists, and the sweep of its own list after a dropped
// connection.
type reliableLife struct {
	cfg      *Config
	own      []string
	hbKey    string
	hbValue  string
	bootID   string
	limit    int
	interval time.Duration

	// Set by the fetch once its slots exist.
	holders      func() map[string]map[string]int
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
}

func newReliableLife(cfg *Config, own []string) *reliableLife {
	l := &reliableLife{
		cfg:      cfg,
		own:      own,
		hbKey:    wire.ReliableHeartbeatKey(cfg.Identity),
		hbValue:  heartbeatValue(),
		bootID:   procstat.BootID(),
		limit:    cfg.RecoveryLimit,
		interval: cfg.RecoveryInterval,
		// A fetch in flight is answered within stallAfter unless Redis
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

// start writes the heartbeat and registers the lists before the first
// fetch, then runs the heartbeat and recovery in the background.
func (l *reliableLife) start(writes *redisx.Retrier) error {
	err := writes.Do(func(conn redis.Conn) error {
		conn.Send("SET", l.hbKey, l.hbValue, "EX", wire.HeartbeatTTL)
		args := []any{wire.KeyWorkingLists}
		for _, k := range l.own {
			args = append(args, k)
		}
		conn.Send("SADD", args...)
		_, err := conn.Do("")
		return err
	})
	if err != nil {
		return fmt.Errorf("sidekiq: reliable fetch heartbeat: %w", err)
	}
	go l.run()
	return nil
}

func (l *reliableLife) run() {
	defer close(l.done)
	beat := time.NewTicker(heartbeatInterval)
	defer beat.Stop()
	next := time.NewTimer(0) // the first pass at once: this host's predecessors
	defer next.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-beat.C:
			l.beat()
		case <-next.C:
			if err := l.pass(l.stop); err != nil && !errors.Is(err, errStopping) {
				l.cfg.Logger.Warn().Err(err).Str("component", "recovery").Msg("orphan recovery pass failed")
			}
			next.Reset(l.interval/2 + rand.N(l.interval))
		}
	}
}

var errStopping = errors.New("stopping")

// beat renews the heartbeat. A renewal that finds the key gone means other
// processes may have taken this one for dead and recovered its jobs.
func (l *reliableLife) beat() {
	ctx, cancel := ctxTimeout(5 * time.Second)
	defer cancel()
	conn, err := l.cfg.Pool.GetContext(ctx)
	if err != nil {
		l.cfg.Outage.Failed(err)
		return
	}
	defer conn.Close()
	prev, err := redis.DoContext(conn, ctx, "SET", l.hbKey, l.hbValue, "EX", wire.HeartbeatTTL, "GET")
	var re redis.Error
	if errors.As(err, &re) {
		// SET … GET needs Redis 6.2.
		_, err = redis.DoContext(conn, ctx, "SET", l.hbKey, l.hbValue, "EX", wire.HeartbeatTTL)
		prev = l.hbValue
	}
	if err != nil {
		l.cfg.Outage.Failed(err)
		return
	}
	if prev == nil {
		l.cfg.Logger.Error().Str("component", "fetch").Str("identity", l.cfg.Identity).
			Msg("this process's reliable-fetch heartbeat had expired (was it stopped for a minute?); other processes may have recovered, and will run again, the jobs it is running")
	}
}

// notOwned logs a finished job that was no longer in its in-progress list.
func (l *reliableLife) notOwned(list string, raw []byte) {
	l.cfg.Logger.Warn().Str("component", "fetch").Str("list", list).Bytes("payload", raw).
		Msg("a finished job was no longer in this process's in-progress list: another process recovered it and runs it again")
}

// pass is one recovery pass: the lists of gojob's registry, the keyspace
// SCAN when it is due, and this process's own list when a connection was
// dropped. It ends early when stop (nil: never) is closed.
func (l *reliableLife) pass(stop <-chan struct{}) error {
	lists, err := l.candidateLists()
	if err != nil {
		return err
	}
	own := map[string]bool{}
	for _, k := range l.own {
		own[k] = true
	}
	var errs []error
	for _, key := range lists {
		select {
		case <-stop:
			return errStopping
		default:
		}
		if own[key] {
			continue
		}
		if _, err := l.recoverList(key); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
		}
	}
	if l.holders != nil {
		if err := l.sweepOwn(false); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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
// back to their queue (or, poison pills, to the dead set). It returns how
// many it moved; a live owner's list is left alone.
func (l *reliableLife) recoverList(key string) (int, error) {
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
	conn.Send("GET", hbKey)
	conn.Send("EXISTS", identity)
	conn.Send("LRANGE", key, 0, -1)
	replies, err := redis.Values(redis.DoContext(conn, ctx, ""))
	if err != nil {
		return 0, err
	}
	force := false
	if hb, _ := redis.String(replies[0], nil); hb != "" {
		if !l.sameHostGone(identity, hb) {
			return 0, nil // alive
		}
		force = true
	} else if n, _ := redis.Int(replies[1], nil); n == 1 {
		return 0, nil // its Sidekiq heartbeat is alive
	}
	jobs, err := redis.ByteSlices(replies[2], nil)
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
// holds: jobs moved by a fetch whose connection was dropped before its
// reply was read (a stalled or vanished Redis may run it later). An entry
// must be seen unheld twice, stallAfter apart, with no reply outstanding
// from before the first look, so that a fetch still in flight is never
// taken for an orphan. final (at Close, no slot left) requeues at once.
func (l *reliableLife) sweepOwn(final bool) error {
	now := time.Now()
	if !final {
		d := l.dropped()
		if d == l.sweptDropped && l.candidates == nil {
			return nil
		}
		if l.candidates != nil && now.Sub(l.candidatesAt) < l.sweepDelay {
			return nil
		}
	}
	entries, err := l.ownEntries()
	if err != nil {
		return err
	}
	unheld := entries
	if l.holders != nil {
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
	if len(units) == 0 {
		return nil
	}
	l.cfg.Logger.Warn().Str("component", "fetch").Int("jobs", len(units)).Bool("at_stop", final).
		Msg("jobs in this process's in-progress list that no slot runs (a dropped connection's fetch); back to their queues")
	return requeue(l.cfg, units)
}

func (l *reliableLife) ownEntries() (map[string]map[string]int, error) {
	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	conn, err := l.cfg.Pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	for _, k := range l.own {
		conn.Send("LRANGE", k, 0, -1)
	}
	replies, err := redis.Values(redis.DoContext(conn, ctx, ""))
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]int{}
	for i, r := range replies {
		raws, err := redis.ByteSlices(r, nil)
		if err != nil {
			return nil, err
		}
		for _, raw := range raws {
			add(out, l.own[i], raw)
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

// close sweeps the own lists one last time, then ends the heartbeat and
// the recovery: the heartbeat key is deleted, so that whatever is left in
// the lists (a write that failed, a stalled fetch that Redis runs later)
// is recovered by other processes at their next pass.
func (l *reliableLife) close() {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.done
	if err := l.sweepOwn(true); err != nil {
		l.cfg.Logger.Error().Err(err).Str("component", "fetch").Msg("could not sweep the in-progress lists at stop; other processes recover them")
	}
	err := l.cfg.Writes.Do(func(conn redis.Conn) error {
		for _, k := range l.own {
			conn.Send("LLEN", k)
		}
		lens, err := redis.Ints(conn.Do(""))
		if err != nil {
			return err
		}
		args := []any{wire.KeyWorkingLists}
		for i, n := range lens {
			if n == 0 {
				args = append(args, l.own[i])
			}
		}
		conn.Send("DEL", l.hbKey)
		if len(args) > 1 {
			conn.Send("SREM", args...)
		}
		_, err = conn.Do("")
		return err
	})
	if err != nil {
		l.cfg.Logger.Error().Err(err).Str("component", "fetch").Msg("could not remove the reliable-fetch heartbeat at stop; it expires by itself")
	}
}
