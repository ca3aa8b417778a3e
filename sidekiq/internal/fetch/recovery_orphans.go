package fetch

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/procstat"
	"github.com/gojob/gojob/internal/redisreply"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

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
		_, identity, ok := contract.ParseWorkingListKey(key)
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

// conn returns a connection of the pool for a step of a recovery pass,
// with the step's context (30 s); release closes both.
func (l *reliableLife) conn() (context.Context, redis.Conn, func(), error) {
	ctx, cancel := ctxTimeout(30 * time.Second)
	conn, err := l.cfg.Pool.GetContext(ctx)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return ctx, conn, func() { conn.Close(); cancel() }, nil
}

// pipeline sends the commands send queues on a connection of the pool, in
// one round trip, and returns their replies.
func (l *reliableLife) pipeline(send func(conn redis.Conn)) ([]any, error) {
	ctx, conn, release, err := l.conn()
	if err != nil {
		return nil, err
	}
	defer release()
	send(conn)
	return redisreply.Pipeline(ctx, conn)
}

// gone returns the owners among identities that are gone, each with
// whether it is known gone although its keys have not expired yet (same
// host, its pid ended): one pipeline for all of them.
func (l *reliableLife) gone(identities []string) (map[string]bool, error) {
	out := map[string]bool{}
	if len(identities) == 0 {
		return out, nil
	}
	replies, err := l.pipeline(func(conn redis.Conn) {
		for _, id := range identities {
			conn.Send("GET", contract.ReliableHeartbeatKey(id))
			conn.Send("EXISTS", id)
		}
	})
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
	ctx, conn, release, err := l.conn()
	if err != nil {
		return nil, err
	}
	defer release()
	lists, err := redis.Strings(redis.DoContext(conn, ctx, "SMEMBERS", contract.KeyWorkingLists))
	if err != nil {
		return nil, err
	}
	if time.Since(l.lastScan) < scanInterval {
		return lists, nil
	}
	l.lastScan = time.Now()
	ok, err := redis.DoContext(conn, ctx, "SET", contract.KeyRecoveryScanLock, l.cfg.Identity, "NX", "EX", int(scanInterval.Seconds()))
	if err != nil || ok == nil {
		return lists, err
	}
	seen := map[string]bool{}
	for _, k := range lists {
		seen[k] = true
	}
	cursor := "0"
	for {
		vals, err := redis.Values(redis.DoContext(conn, ctx, "SCAN", cursor, "MATCH", contract.WorkingListPattern, "COUNT", 1000))
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
	queue, identity, ok := contract.ParseWorkingListKey(key)
	if !ok {
		return 0, nil
	}
	ctx, conn, release, err := l.conn()
	if err != nil {
		return 0, err
	}
	defer release()
	hbKey := contract.ReliableHeartbeatKey(identity)
	jobs, err := redis.ByteSlices(redis.DoContext(conn, ctx, "LRANGE", key, 0, -1))
	if err != nil {
		return 0, err
	}
	if len(jobs) == 0 {
		// An empty list is no key: drop a stale registry entry.
		_, err := redis.DoContext(conn, ctx, "SREM", contract.KeyWorkingLists, key)
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
	counter := contract.RecoveryCountKey(jid)
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
		deadScore = contract.Score(now)
		deadPayload = poisonPayload(job, pill, now, l.cfg.Format.Version())
		lim := contract.MorgueLimits{}.OrDefault()
		cutoff = contract.FormatScore(contract.EpochSeconds(now) - lim.Timeout.Seconds())
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
	n, err := redis.Int(recoverScript.DoContext(ctx, conn, list, hbKey, identity, contract.QueueKey(queue), counter,
		contract.KeyDead, contract.KeyWorkingLists, raw, mode, forced, countIt, recoveryCountTTL,
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
		j.Set("retried_at", contract.TimestampValue(now, v))
	} else {
		j.Set("failed_at", contract.TimestampValue(now, v))
	}
	return j.Bytes()
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
