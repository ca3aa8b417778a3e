package durable

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/clocktest"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/fetchmode"
	"github.com/gojob/gojob/internal/pgtest"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/testlog"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/wire"
)

// The loss test of issue 5: 1000 durable jobs, a gojob worker process
// killed with SIGKILL while it runs some of them (BasicFetch loses the
// jobs in flight), then two reconciler passes. The worker is this test
// binary re-executed in lossChild mode.

const (
	lossChildEnv   = "GOJOB_DURABLE_LOSS_CHILD"
	lossJobs       = 1000
	lossBlockAfter = 300 // jobs completed before the workers hang
	lossConc       = 10  // jobs in flight at the kill
	lossExt        = time.Minute
	keyLossDone    = "losstest:done"
	keyLossBlocked = "losstest:blocked"
)

var lossClasses = map[string]time.Duration{"LossJob": lossExt}

// lossChild is the worker process: it completes lossBlockAfter jobs
// (recording each in losstest:done), then every slot hangs in its next job
// and reports it on losstest:blocked, until the parent kills it.
func lossChild() int {
	log := zerolog.New(os.Stderr).With().Timestamp().Str("process", "loss-child").Logger()
	fail := func(err error) int {
		log.Error().Err(err).Msg("loss child failed")
		return 2
	}
	pool, err := sidekiq.NewPool(os.Getenv("LOSS_REDIS"))
	if err != nil {
		return fail(err)
	}
	d, err := New(&Config{URLs: []string{os.Getenv("LOSS_DB")}, Table: os.Getenv("LOSS_TABLE"), Classes: lossClasses, Logger: log})
	if err != nil {
		return fail(err)
	}
	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool, Extensions: []sidekiq.Extension{d}})
	if err != nil {
		return fail(err)
	}
	fetch, err := fetchmode.Parse(os.Getenv("LOSS_FETCH"))
	if err != nil {
		return fail(err)
	}
	srv, err := sidekiq.NewServer(&sidekiq.ServerConfig{Extensions: []sidekiq.Extension{d}, Pool: pool, Client: client, Concurrency: lossConc, DisablePoller: true, Logger: log, Fetch: fetch})
	if err != nil {
		return fail(err)
	}
	var started atomic.Int64
	completeAll := os.Getenv("LOSS_MODE") == "complete" // every job completes (group_commit_crash_test.go)
	srv.Handle("LossJob", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		conn := pool.Get()
		defer conn.Close()
		if started.Add(1) > lossBlockAfter && !completeAll {
			if _, err := conn.Do("LPUSH", keyLossBlocked, job.JID()); err != nil {
				return err
			}
			<-ctx.Done()
			return ctx.Err()
		}
		_, err := conn.Do("SADD", keyLossDone, job.JID())
		return err
	}), nil)
	if err := srv.Start(context.Background()); err != nil {
		return fail(err)
	}
	select {}
}

func TestLossKill9(t *testing.T) {
	t.Parallel()
	e := startLoss(t)
	st, err := e.d.Status(e.ctx)
	require.NoError(t, err)
	require.Equal(t, int64(lossJobs), st.Databases[0].Total)
	ids := e.killWorkerInJobs(t, "basic")
	conn, pool, ctx, d, client, jobs := e.conn, e.pool, e.ctx, e.d, e.client, e.jobs

	// The process's heartbeat keys expire 60 s after its last beat, long
	// before a second strike (two extensions later); expire them now.
	_, err = conn.Do("DEL", ids[0])
	require.NoError(t, err)

	done, err := redis.Strings(conn.Do("SMEMBERS", keyLossDone))
	require.NoError(t, err)
	require.Len(t, done, lossBlockAfter)
	queued, err := redis.Strings(conn.Do("LRANGE", contract.QueueKey("default"), 0, -1))
	require.NoError(t, err)
	require.Len(t, queued, lossJobs-lossBlockAfter-lossConc)
	doneSet, queuedSet := map[string]bool{}, map[string]bool{}
	for _, jid := range done {
		doneSet[jid] = true
	}
	for _, p := range queued {
		j, err := wire.ParseJob([]byte(p))
		require.NoError(t, err)
		queuedSet[j.JID()] = true
	}
	var lost []string
	for _, j := range jobs {
		if !doneSet[j.JID()] && !queuedSet[j.JID()] {
			lost = append(lost, j.JID())
		}
	}
	require.Len(t, lost, lossConc, "BasicFetch lost the jobs in flight")
	require.Equal(t, 0, zcard(t, conn, contract.KeyDead))

	// Rows are due one extension after their job's start (in flight) or
	// push (queued); on a loaded machine the last start can be seconds after
	// the push, so the clock starts from the kill.
	clk := clocktest.NewFake(e.killedAt.Add(lossExt + time.Second))
	admin, err := api.New(&api.Config{Pool: pool, Clock: clk, Client: client})
	require.NoError(t, err)
	r, err := NewReconciler(&ReconcilerConfig{Durable: d, API: admin, Clock: clk})
	require.NoError(t, err)
	first, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, lossConc, first.Marked)
	require.Equal(t, len(queued), first.Queued)
	require.Equal(t, 0, first.Killed)
	clk.Advance(lossExt + time.Second)
	second, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, lost, second.KilledJIDs)
	require.Equal(t, len(queued), second.Queued)

	// Every lost job is in the dead set with durable_killed_at; no completed
	// job is there; nothing else changed.
	deadVals, err := redis.ByteSlices(conn.Do("ZRANGE", contract.KeyDead, 0, -1))
	require.NoError(t, err)
	var deadJIDs []string
	for _, v := range deadVals {
		j, err := wire.ParseJob(v)
		require.NoError(t, err)
		require.True(t, j.Has("durable_killed_at"), string(v))
		require.False(t, doneSet[j.JID()], "a completed job is in the dead set")
		require.Equal(t, "LossJob", j.Class())
		deadJIDs = append(deadJIDs, j.JID())
	}
	require.ElementsMatch(t, lost, deadJIDs)
	after, err := redis.Strings(conn.Do("LRANGE", contract.QueueKey("default"), 0, -1))
	require.NoError(t, err)
	require.Equal(t, queued, after, "queue unchanged")
	doneAfter, err := redis.Strings(conn.Do("SMEMBERS", keyLossDone))
	require.NoError(t, err)
	require.ElementsMatch(t, done, doneAfter)
	require.Equal(t, 0, zcard(t, conn, contract.KeyRetry))
	require.Equal(t, 0, zcard(t, conn, contract.KeySchedule))
	st, err = d.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, DatabaseStatus{Database: st.Databases[0].Database, Kind: "postgres", Total: int64(len(queued)), Waiting: int64(len(queued)),
		NextDue: st.Databases[0].NextDue}, st.Databases[0], "only the queued jobs keep rows")
	for _, jid := range done {
		r, err := d.get(ctx, jid)
		require.NoError(t, err)
		require.Nil(t, r, fmt.Sprintf("completed job %s has no row", jid))
	}
}

func zcard(t testing.TB, conn redis.Conn, key string) int {
	t.Helper()
	n, err := redis.Int(conn.Do("ZCARD", key))
	require.NoError(t, err)
	return n
}

// With reliable fetch, the same kill loses nothing: the jobs in flight are
// in the dead process's in-progress list, which the reconciler counts as
// in progress (never missing, never killed), and a new process recovers
// and runs them.
func TestLossKill9WithReliableFetchKillsNothing(t *testing.T) {
	t.Parallel()
	e := startLoss(t)
	ids := e.killWorkerInJobs(t, "reliable")
	// Expire the dead process's Sidekiq heartbeat now, as in TestLossKill9.
	_, err := e.conn.Do("DEL", ids[0])
	require.NoError(t, err)
	conn := e.conn
	inFlight := len(redistest.InProgress(t, conn, ids[0]))
	require.Equal(t, lossConc, inFlight, "the jobs in flight are in the dead process's in-progress list")

	// Rows are due one extension after their job's start (in flight) or
	// push (queued); on a loaded machine the last start can be seconds after
	// the push, so the clock starts from the kill.
	e.reconcileKillsNothing(t, func(pass int, res *ReconcileResult) {
		require.Equal(t, lossConc, res.InProgress, "pass %d", pass)
	})
	require.Equal(t, 0, zcard(t, conn, contract.KeyDead))

	// A new process recovers the dead one's jobs at once (same host, its
	// pid is gone) and runs everything left.
	e.recoverAndRunAll(t)
}

// reconcileKillsNothing runs two reconciler passes, the first one
// extension after the kill and the second one extension later: neither
// marks a row missing nor kills a job; check looks at each pass's result
// too.
func (e *lossEnv) reconcileKillsNothing(t *testing.T, check func(pass int, res *ReconcileResult)) {
	t.Helper()
	clk := clocktest.NewFake(e.killedAt.Add(lossExt + time.Second))
	admin, err := api.New(&api.Config{Pool: e.pool, Clock: clk, Client: e.client})
	require.NoError(t, err)
	r, err := NewReconciler(&ReconcilerConfig{Durable: e.d, API: admin, Clock: clk})
	require.NoError(t, err)
	for pass := range 2 {
		res, err := r.RunOnce(e.ctx)
		require.NoError(t, err)
		check(pass, res)
		require.Zero(t, res.Marked+res.Killed, "pass %d", pass)
		clk.Advance(lossExt + time.Second)
	}
}

// recoverAndRunAll starts a new process with reliable fetch, which
// recovers the killed one's in-progress list, and waits until every job
// has run and every row is gone, with none in the dead set.
func (e *lossEnv) recoverAndRunAll(t *testing.T) {
	t.Helper()
	srv, err := sidekiq.NewServer(&sidekiq.ServerConfig{Extensions: []sidekiq.Extension{e.d}, Pool: e.pool, Client: e.client, Concurrency: lossConc, DisablePoller: true,
		Logger: e.log, Fetch: "reliable"})
	require.NoError(t, err)
	srv.Handle("LossJob", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		c := e.pool.Get()
		defer c.Close()
		_, err := c.Do("SADD", keyLossDone, job.JID())
		return err
	}), nil)
	require.NoError(t, srv.Start(e.ctx))
	defer srv.Stop(e.ctx)
	wait.Within(t, 30*time.Second, "every job to run", func() bool {
		n, _ := redis.Int(e.conn.Do("SCARD", keyLossDone))
		return n == lossJobs
	})
	wait.Within(t, 30*time.Second, "every row to go", func() bool {
		st, err := e.d.Status(e.ctx)
		return err == nil && st.Databases[0].Total == 0
	})
	require.Equal(t, 0, zcard(t, e.conn, contract.KeyDead))
}

// jobsAmong counts the entries of raws whose jid is one of jids.
func jobsAmong[R string | []byte](raws []R, jids []string) int {
	want := map[string]bool{}
	for _, jid := range jids {
		want[jid] = true
	}
	n := 0
	for _, raw := range raws {
		if _, ok := contract.MemberJID([]byte(raw), want); ok {
			n++
		}
	}
	return n
}

// lossEnv is a durable store, a Redis and lossJobs durable jobs pushed.
type lossEnv struct {
	rs     *redistest.Server
	pool   *redis.Pool
	conn   redis.Conn
	ctx    context.Context
	logs   io.Writer
	log    zerolog.Logger
	dbURL  string
	table  string
	d      *Durable
	client *sidekiq.Client
	jobs   []*wire.Job
	// killedAt is just after the worker's kill: every job it started (and
	// pushed its row's assume_dead_at forward) started before it.
	killedAt time.Time
}

func startLoss(t *testing.T) *lossEnv {
	t.Helper()
	e := &lossEnv{dbURL: pgtest.Databases(t)[0], table: uniqueTable(), rs: redistest.Start(t), ctx: context.Background()}
	e.pool = e.rs.Pool(t)
	e.conn = e.pool.Get()
	t.Cleanup(func() { e.conn.Close() })
	e.logs = testlog.New(t)
	e.log = zerolog.New(e.logs)
	d, err := New(&Config{URLs: []string{e.dbURL}, Table: e.table, Classes: lossClasses, Logger: e.log})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	e.d = d
	_, err = d.Migrate(e.ctx)
	require.NoError(t, err)
	e.client, err = sidekiq.NewClient(&sidekiq.ClientConfig{Pool: e.pool, Extensions: []sidekiq.Extension{d}})
	require.NoError(t, err)
	e.jobs = make([]*wire.Job, lossJobs)
	for i := range e.jobs {
		e.jobs[i] = newJob(t, "LossJob", i)
	}
	_, err = e.client.PushBulk(e.ctx, e.jobs, nil)
	require.NoError(t, err)
	return e
}

// killWorkerInJobs runs a worker process with the given fetch, waits until
// every slot hangs in a job (each earlier job has finished completely, its
// row deleted, so the kill catches only hanging jobs), kills it with
// SIGKILL and returns the process identities left in Redis.
func (e *lossEnv) killWorkerInJobs(t *testing.T, fetch string) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), lossChildEnv+"=1", "LOSS_REDIS="+e.rs.URL(), "LOSS_DB="+e.dbURL, "LOSS_TABLE="+e.table, "LOSS_FETCH="+fetch)
	cmd.Stdout, cmd.Stderr = e.logs, e.logs
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	waitConn, err := redis.Dial("unix", e.rs.Socket)
	require.NoError(t, err)
	defer waitConn.Close()
	for range lossConc {
		_, err := redis.Values(waitConn.Do("BLPOP", keyLossBlocked, 30))
		require.NoError(t, err, "the worker did not reach its hanging jobs")
	}
	if strings.HasPrefix(fetch, "reliable") {
		// A finished job leaves the in-progress list once its row is
		// deleted, which the group commit may still be doing: wait for
		// those, so that the list holds only the hanging jobs.
		wait.Within(t, 10*time.Second, "finished jobs acknowledged", func() bool {
			ids, _ := redis.Strings(waitConn.Do("SMEMBERS", contract.KeyProcesses))
			if len(ids) != 1 {
				return false
			}
			return len(redistest.InProgress(t, waitConn, ids[0])) == lossConc
		})
	}
	require.NoError(t, cmd.Process.Signal(os.Kill))
	require.Error(t, <-exited, "killed")
	exited <- nil
	e.killedAt = time.Now()
	ids, err := redis.Strings(e.conn.Do("SMEMBERS", contract.KeyProcesses))
	require.NoError(t, err)
	require.Len(t, ids, 1)
	return ids
}
