// Package fetch takes jobs from Sidekiq's queues for a server's idle
// concurrency slots. Each layout is a Fetcher:
//
//   - reliable (NewReliable): every job taken stays in Redis, in an
//     in-progress list of its slot, until its outcome is written, and the
//     jobs of a process that dies are recovered (reliable.go, lists.go,
//     recovery.go);
//   - BRPOP (NewBRPOP): Sidekiq's BasicFetch, one `BRPOP queue:a queue:b … 2`
//     per idle slot, the BRPOPs of several slots pipelined on one
//     connection.
//
// A job is taken only for a slot that is free to run it (or, fetching
// ahead, about to be), so a BasicFetch crash loses exactly what Ruby's
// loses: the jobs being run. The fetch facts are in
// docs/sidekiq-wire.md#fetch and docs/reliable-fetch.md.
//
// The files, top down; a file refers only to files below it, but for the
// take rounds' state (reliable_take.go), which holds the fetch-ahead
// batcher (ahead.go) and the blockers (idle.go) that take through it
// (sidekiq's TestFilesReferOneWay counts these):
//
//   - the modes: batch.go and brpop.go (over pipe.go), reliable.go;
//   - the reliable fetch's parts: life.go (its goroutine: heartbeats,
//     sweeps, orphan recovery passes, changes of master) over
//     recovery_orphans.go; ahead.go and idle.go over reliable_take.go (the
//     take rounds) over ack.go (acknowledgements); recovery.go (heartbeats,
//     own-list sweeps); wake.go (queue wakers);
//   - what they share: scripts.go (the Lua), pipe.go, fetch.go (Config,
//     connections), unit.go (Unit and the slots' mirrors), order.go,
//     master.go (run_id), lists.go (list identities), fifo.go; the raw
//     RESP path of the rounds is package resp.
package fetch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redisreply"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Outcome is the write that ends a failed job: its retry entry or its
// dead-set entry (with the trims of contract.SendToMorgue).
type Outcome struct {
	// Set is contract.KeyRetry or contract.KeyDead; "" writes nothing (the job is
	// dropped: retry false, a discard).
	Set string
	// At is the retry time or the time of death (the score).
	At time.Time
	// Payload is the member written.
	Payload []byte
}

// Fetcher feeds the slots of a server.
type Fetcher interface {
	// Start starts the fetch goroutines and the slots. Each slot calls
	// Config.Process for every job fetched for it and stops fetching when
	// Config.Quiet is closed.
	Start()
	// Wait blocks until every slot and fetch goroutine has returned (after
	// quiet, once the running jobs are done).
	Wait()
	// Requeue gives unfinished jobs back to the pop end of their queues, so
	// they run next, as Sidekiq's bulk_requeue: one pipeline with one
	// `RPUSH queue:<q> job…` per queue, retried through an outage until
	// Config.Writes gives up. A reliable fetch moves them out of its
	// in-progress lists in the same atomic step, so none runs twice.
	Requeue(units []Unit) error
	// Close ends what outlives the slots (the reliable fetch's heartbeat and
	// orphan recovery) once the server has requeued its unfinished jobs.
	Close()
	// Finish ends a unit the slot processed: nil for a success, otherwise
	// the failure's outcome, written through an outage. A fetch that keeps
	// running jobs in Redis (reliable) releases the unit in the same atomic
	// step.
	Finish(u Unit, o *Outcome) error
	// Depth is the number of fetches one connection carries at most, 0 for
	// the batch fetch.
	Depth() int
}

// Config is what a Fetcher needs from its server.
type Config struct {
	// Pool serves the short commands (CLIENT probes, COMMAND INFO).
	Pool *redis.Pool
	// Dial opens the fetch connections, which are not pooled.
	Dial func(ctx context.Context) (redis.Conn, error)
	// Order is the queue order.
	Order *Order
	// Concurrency is the number of slots.
	Concurrency int
	// Pipeline is how many BRPOPs one connection carries (BRPOP layout).
	Pipeline int
	// Quiet is closed when the server goes quiet: slots stop fetching.
	Quiet <-chan struct{}
	// Process runs one job to completion in slot (0 to Concurrency-1),
	// whose thread id is TIDFor(slot), and returns how long the job ran (0 when it
	// did not run): the reliable fetch fetches ahead for slots whose jobs
	// are short. The processor times its jobs anyway; the fetch reads no
	// clock of its own per job.
	Process func(slot int, u Unit) time.Duration
	// Writes carries the requeues through an outage.
	Writes *redisx.Retrier
	// Outage is told about fetch connection failures.
	Outage *redisx.OutageLog
	// Logger receives the fetch logs.
	Logger zerolog.Logger

	// Health records what the fetch's round trips say of Redis (optional).
	Health *Health

	// ReliableConfig is what the reliable fetch needs besides (NewReliable).
	ReliableConfig
}

// ReliableConfig is the reliable fetch's part of its Config.
type ReliableConfig struct {
	// Identity is the process identity ("host:pid:nonce"), which names its
	// in-progress lists.
	Identity string
	// Format is the format of the dead-set entries it writes for poison
	// pills, read when one is written. Required for reliable fetch.
	Format *contract.LiveFormat
	// Clock is the time of those entries.
	Clock clock.Clock
	// RecoveryLimit is how many times a job may be recovered from a dead
	// process before it is a poison pill (to the dead set). Default 3.
	RecoveryLimit int
	// RecoveryInterval is the time between orphan recovery passes. Default
	// 15 s.
	RecoveryInterval time.Duration
	// AheadDepth is how many jobs a busy slot holds fetched ahead at most
	// (ahead.go): 0 means aheadDepth, a negative value none.
	AheadDepth int
	// AheadHold is how long a job fetched ahead waits for its slot, and
	// sets how long a slot's last job may have taken for it to fetch
	// ahead, a fifth of it (ahead.go): 0 means aheadHold and aheadMaxRun.
	AheadHold time.Duration
	// Prepare, when set, is the prepare of the fetches ahead that the
	// fetch makes on its own, while every slot is busy (ahead.go).
	Prepare func(next *Unit)
	// Died is called for a poison pill moved to the dead set.
	Died func(job *wire.Job, err error)
	// Stats counts the recoveries (optional).
	Stats *Stats
	// BlockSeconds is the timeout of the wakers' and the idle slots'
	// blocking moves (wake.go, idle.go): how often they come back to see
	// whether they are still needed. 0 means Timeout, 2 s (Sidekiq's BRPOP
	// timeout, lib/sidekiq/fetch.rb TIMEOUT).
	// Tests that check a job is seen by a waker or a blocker, not after a
	// timeout, make it long.
	BlockSeconds int
}

// blockSeconds returns the blocking moves' timeout (BlockSeconds).
func (c *ReliableConfig) blockSeconds() int {
	if c.BlockSeconds > 0 {
		return c.BlockSeconds
	}
	return Timeout
}

// Health is what a fetch's round trips say of Redis: since when they fail
// (none has succeeded since) and with what. A server is not ready while
// its fetch fails, whatever its other connections see: a fetch that fails
// while the heartbeat succeeds is a process that takes no job.
//
// An error reply of Redis (a refused command, a queue key that is not a
// list) is logged here, once when the fetch starts failing and once when
// it works again; a connection failure is the outage log's.
type Health struct {
	// Log receives the two lines of a failure that is Redis's answer.
	Log     *zerolog.Logger
	failing atomic.Int64 // unix ns of the first failure since the last success; 0: none
	err     atomic.Pointer[error]
	// replied: the failure under way began with an error reply.
	replied atomic.Bool
}

func (h *Health) ok() {
	if h == nil || h.failing.Load() == 0 {
		return
	}
	since := h.failing.Swap(0)
	if since != 0 && h.replied.Swap(false) && h.Log != nil {
		h.Log.Info().Str("component", "fetch").Str("failed_for", redisx.LogDuration(time.Since(time.Unix(0, since)))).
			Msg("fetching works again")
	}
}

func (h *Health) failed(err error) {
	if h == nil {
		return
	}
	h.err.Store(&err)
	if h.failing.CompareAndSwap(0, time.Now().UnixNano()) && isReply(err) {
		h.replied.Store(true)
		if h.Log != nil {
			h.Log.Error().Err(err).Str("component", "fetch").Msg("fetching fails: redis refuses the fetch's commands; retrying with backoff")
		}
	}
}

// cleared ends a failure that was err (and no other since): what kept the
// fetch from taking jobs is over, though no round trip has succeeded yet.
func (h *Health) cleared(err error) {
	if h == nil {
		return
	}
	if e := h.err.Load(); e != nil && *e == err {
		h.ok()
	}
}

// Failing returns since when the fetch has failed (zero when its last
// round trip succeeded) and its last error.
func (h *Health) Failing() (time.Time, error) {
	n := h.failing.Load()
	if n == 0 {
		return time.Time{}, nil
	}
	var err error
	if e := h.err.Load(); e != nil {
		err = *e
	}
	return time.Unix(0, n), err
}

// Stats counts what the reliable fetch's recovery did (the metrics
// exporter reads it).
type Stats struct {
	// Recovered counts jobs pushed back to their queue from the
	// in-progress lists of processes that are gone.
	Recovered atomic.Int64
	// PoisonPills counts recovered jobs moved to the dead set instead
	// (recovered too often).
	PoisonPills atomic.Int64
}

func (s *Stats) add(recovered, poisoned int) {
	if s != nil {
		s.Recovered.Add(int64(recovered))
		s.PoisonPills.Add(int64(poisoned))
	}
}

func (c *Config) quiet() bool {
	select {
	case <-c.Quiet:
		return true
	default:
		return false
	}
}

// sleepOrQuiet sleeps d and reports false when the server went quiet.
func (c *Config) sleepOrQuiet(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.Quiet:
		return false
	}
}

// backoff waits out a fetch connection's backoff step d, or less when
// another connection reaches Redis first; false when the server went
// quiet.
func (c *Config) backoff(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.Outage.Back():
		return true
	case <-c.Quiet:
		return false
	}
}

// maxBackoff is the longest a fetch connection waits between tries
// through an outage; the server's probe wakes it sooner (within about
// 200 ms of Redis coming back: redisx.OutageLog.Probe).
const maxBackoff = 2 * time.Second

func (c *Config) dial() (redis.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Dial(ctx)
}

// requeue pushes jobs back to the pop end of their queue in one RPUSH (the
// last one given is popped first), retrying through an outage until the
// server's shutdown gives up.
func (c *Config) requeue(queue string, raws ...[]byte) {
	args := make([]any, 0, len(raws)+1)
	args = append(args, contract.QueueKey(queue))
	for _, r := range raws {
		args = append(args, r)
	}
	err := c.Writes.Do(func(conn redis.Conn) error {
		_, err := conn.Do("RPUSH", args...)
		return err
	})
	if err != nil {
		for _, raw := range raws {
			c.Logger.Error().Err(err).Str("queue", queue).Bytes("payload", raw).Msg("could not requeue job")
		}
	}
}

// writeOutcome writes a failed job's retry or dead-set entry, retrying
// through an outage until the server's shutdown gives up.
func (c *Config) writeOutcome(o *Outcome) error {
	if o == nil || o.Set == "" {
		return nil
	}
	err := c.Writes.Do(func(conn redis.Conn) error {
		if o.Set == contract.KeyDead {
			_, err := contract.SendToMorgue(c.Writes.Ctx, conn, contract.MorgueParams{Payload: o.Payload, Now: o.At})
			return err
		}
		_, err := conn.Do("ZADD", o.Set, contract.Score(o.At), o.Payload)
		return err
	})
	if err != nil {
		c.Logger.Error().Err(err).Str("component", "processor").Str("set", o.Set).Bytes("payload", o.Payload).
			Msg("could not write the job's outcome")
		return fmt.Errorf("sidekiq: write to %s: %w", o.Set, err)
	}
	return nil
}

// bulkRequeue is Requeue for the layouts that keep nothing in Redis while a
// job runs.
func (c *Config) bulkRequeue(units []Unit) error {
	if len(units) == 0 {
		return nil
	}
	var order []string
	byQueue := map[string][]any{}
	for _, u := range units {
		if _, ok := byQueue[u.Queue]; !ok {
			order = append(order, u.Queue)
		}
		byQueue[u.Queue] = append(byQueue[u.Queue], u.Raw)
	}
	err := c.Writes.Do(func(conn redis.Conn) error {
		for _, q := range order {
			conn.Send("RPUSH", append([]any{contract.QueueKey(q)}, byQueue[q]...)...)
		}
		_, err := redisreply.Pipeline(c.Writes.Ctx, conn)
		return err
	})
	if err != nil {
		for _, u := range units {
			c.Logger.Error().Str("queue", u.Queue).Bytes("payload", u.Raw).Msg("could not requeue job at shutdown")
		}
		return fmt.Errorf("sidekiq: requeue %d jobs: %w", len(units), err)
	}
	c.Logger.Info().Int("jobs", len(units)).Msg("requeued unfinished jobs")
	return nil
}

// do runs one command on a fetch connection, logging a stall once (as the
// pipes' watch does) when Redis takes longer than stallAfter to answer.
func (c *Config) do(conn redis.Conn, cmd string, args ...any) (any, error) {
	t := time.AfterFunc(stallAfter, func() { c.Outage.Stalled(stallAfter) })
	defer t.Stop()
	return conn.Do(cmd, args...)
}

// conn is a fetch connection and its reconnect policy.
type conn struct {
	cfg   *Config
	c     redis.Conn
	fresh bool // dialled for the coming command
	b     redisx.Backoff
	// watcher: a waker's connection, whose commands take no job and so
	// say nothing of the fetch's health.
	watcher bool
	// dialed, when set, checks each new connection before its first
	// command (the reliable fetch's change of master: master.go).
	dialed func(redis.Conn) error
}

func (f *conn) health() *Health {
	if f.watcher {
		return nil
	}
	return f.cfg.Health
}

// ready makes sure there is a connection, dialling with backoff through an
// outage; it reports false when the server went quiet meanwhile.
func (f *conn) ready() bool {
	if f.c != nil {
		f.fresh = false
		return true
	}
	for {
		c, err := f.cfg.dial()
		if err == nil && f.dialed != nil {
			if err = f.dialed(c); err != nil {
				c.Close()
			}
		}
		if err == nil {
			f.c, f.fresh = c, true
			return true
		}
		f.cfg.Outage.Failed(err)
		f.health().failed(err)
		f.b.Max = maxBackoff
		if !f.cfg.backoff(f.b.Next()) {
			return false
		}
	}
}

// failed drops the connection after an error. A connection error on a
// connection that had been idle (Redis restarted while we ran a job) is
// retried at once; anything else is an outage, with backoff. It reports
// false when the server went quiet meanwhile.
func (f *conn) failed(err error) bool {
	f.close()
	if !f.fresh && redisx.IsConnError(err) {
		return true
	}
	if !isReply(err) {
		f.cfg.Outage.Failed(err)
	}
	f.health().failed(err)
	f.b.Max = maxBackoff
	return f.cfg.backoff(f.b.Next())
}

// refused handles a refusal of a Redis that cannot take a round now (one
// still loading its data after a restart, a replica after a failover): as
// through an outage, the connection is dropped (the next one is dialled to
// the master of the moment) and the fetch backs off until the server's
// probe finds Redis taking writes again. false when the server went quiet.
func (f *conn) refused(err error) bool {
	f.close()
	f.cfg.Outage.Failed(err)
	f.health().failed(err)
	f.b.Max = maxBackoff
	return f.cfg.backoff(f.b.Next())
}

// errorReply handles an error reply to a round (a queue key that is not
// a list, say): it backs off as an outage does instead of spinning; a
// refusal of a Redis that is loading or no longer the master (READONLY
// after a failover) is handled by refused. false when the server went
// quiet.
func (f *conn) errorReply(err error) bool {
	if redisx.IsTransient(err) {
		return f.refused(err)
	}
	f.health().failed(err)
	return f.cfg.sleepOrQuiet(time.Second)
}

// ok records the success of a command sent at sent.
func (f *conn) ok(sent time.Time) {
	f.cfg.Outage.OKSince(sent)
	f.health().ok()
	f.b.Reset()
}

func (f *conn) close() {
	if f.c != nil {
		f.c.Close()
		f.c = nil
	}
}

// TIDFor returns the base-36 thread id of a slot as Ruby makes it,
// (Thread#object_id ^ pid).to_s(36) (lib/sidekiq/component.rb#tid): Ruby's
// object ids are small multiples of 8, so its tids are as long as its pid
// in base 36, 3 or 4 characters (captured 7.3.10: `eip`, pid 19741, object
// id 1180). XOR with the pid keeps the slots' ids distinct.
func TIDFor(slot int) string {
	n := uint64(8*(slot+1)) ^ uint64(os.Getpid())
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	var b [13]byte
	i := len(b)
	for {
		i--
		b[i] = digits[n%36]
		n /= 36
		if n == 0 {
			break
		}
	}
	return string(b[i:])
}

// reversed returns a reversed copy of b.
func reversed(b [][]byte) [][]byte {
	out := make([][]byte, len(b))
	for i, x := range b {
		out[len(b)-1-i] = x
	}
	return out
}

// isReply reports whether err is an error reply of Redis (the connection
// is fine).
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// stallAfter is how long a pipe waits for one reply before it logs Redis
// as stalled. A blocking fetch answers within its timeout (Timeout), so a
// longer silence is a stalled or unreachable Redis. The pipe keeps waiting
// on the connection: a stalled Redis that resumes still answers, and a
// command it ran must not be left unread (a BRPOP whose reply is never
// read loses its job). A vanished host is noticed by TCP keepalive
// (sidekiq.Dialer), which ends the read with an error.
const stallAfter = (Timeout + 10) * time.Second

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// ctxTimeout is a context for one short Redis call of the background
// goroutines.
func ctxTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
