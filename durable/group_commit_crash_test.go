package durable

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
)

// A worker killed with SIGKILL while the success deletes of completed jobs
// wait in the group commit loses no row and gets no completed job killed:
// with reliable fetch such a job leaves its in-progress list only after
// its row is gone, so it is still there at the kill, the reconciler counts
// it in progress, and a new process recovers it (it runs again: at least
// once) and deletes its row.
//
// To hold a delete deterministically, the test keeps a FOR KEY SHARE lock
// on the row of an early job: its lock (an UPDATE of non-key columns)
// goes through, its delete waits, and so does the group that carries it
// (the other group slot carries on).
func TestKillInsideTheDeleteWindowLosesNoRowAndKillsNoCompletedJob(t *testing.T) {
	t.Parallel()
	e := startLoss(t)
	ctx := e.ctx
	held := e.jobs[280:281]
	var heldJIDs []any
	for _, j := range held {
		heldJIDs = append(heldJIDs, j.JID())
	}
	pgc, err := pgx.Connect(ctx, e.dbURL)
	require.NoError(t, err)
	defer pgc.Close(ctx)
	tx, err := pgc.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	in := make([]string, len(heldJIDs))
	for i := range in {
		in[i] = fmt.Sprintf("$%d", i+1)
	}
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+pgx.Identifier{"public", e.table}.Sanitize()+
		` WHERE job_id IN (`+strings.Join(in, ", ")+`) FOR KEY SHARE) x`, heldJIDs...).Scan(&n))
	require.Equal(t, len(held), n)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), lossChildEnv+"=1", "LOSS_REDIS="+e.rs.URL(), "LOSS_DB="+e.dbURL, "LOSS_TABLE="+e.table,
		"LOSS_FETCH=reliable", "LOSS_MODE=complete")
	cmd.Stdout, cmd.Stderr = e.logs, e.logs
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	conn := e.conn
	wait.Within(t, 30*time.Second, "the held job and 400 jobs to complete", func() bool {
		done, _ := redis.Int(conn.Do("SCARD", keyLossDone))
		for _, jid := range heldJIDs {
			if ok, _ := redis.Bool(conn.Do("SISMEMBER", keyLossDone, jid)); !ok {
				return false
			}
		}
		return done >= 400
	})
	require.NoError(t, cmd.Process.Signal(os.Kill))
	require.Error(t, <-exited, "killed")
	exited <- nil
	killedAt := time.Now()
	require.NoError(t, tx.Rollback(ctx))

	ids, err := redis.Strings(conn.Do("SMEMBERS", contract.KeyProcesses))
	require.NoError(t, err)
	require.Len(t, ids, 1)
	_, err = conn.Do("DEL", ids[0]) // its Sidekiq heartbeat expires
	require.NoError(t, err)
	var heldIDs []string
	for _, j := range held {
		heldIDs = append(heldIDs, j.JID())
	}
	found := jobsAmong(redistest.InProgress(t, conn, ids[0]), heldIDs)
	require.Equal(t, len(held), found, "the completed jobs whose rows were not deleted are still in the in-progress list")
	// The row is kept, unless the dead worker's backend, blocked on the
	// test's lock when its client died, completes the delete now that the
	// lock is gone (PostgreSQL notices a vanished client only when it next
	// talks to it). Either way the job is recovered below.

	// Two passes, an extension apart: nothing is missing, nothing killed.
	e.killedAt = killedAt
	e.reconcileKillsNothing(t, func(pass int, res *ReconcileResult) {
		require.GreaterOrEqual(t, res.InProgress, len(held), "pass %d", pass)
	})

	// A new process recovers the dead one's list and runs what is left.
	e.recoverAndRunAll(t)
}

// A job starts as soon as its lock is queued (one PostgreSQL database),
// and a job that completes before a group took its lock writes its delete
// in the lock's place. A worker killed with SIGKILL while no lock or delete
// could be written (the test holds every row FOR UPDATE, so the first
// group waits and every later write queues behind it) loses no row and
// gets no job killed: the jobs that ran, completed or not, are in its
// in-progress list (a completed job leaves it only once its row is gone),
// their rows are as the push wrote them, and a new process recovers and
// runs them and deletes their rows.
func TestKillWhileJobsRunBeforeTheirLocksLosesNoRowAndKillsNoJob(t *testing.T) {
	t.Parallel()
	e := startLoss(t)
	ctx := e.ctx
	qtable := pgx.Identifier{"public", e.table}.Sanitize()
	pgc, err := pgx.Connect(ctx, e.dbURL)
	require.NoError(t, err)
	defer pgc.Close(ctx)
	tx, err := pgc.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+qtable+` FOR UPDATE) x`).Scan(&n))
	require.Equal(t, lossJobs, n)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), lossChildEnv+"=1", "LOSS_REDIS="+e.rs.URL(), "LOSS_DB="+e.dbURL, "LOSS_TABLE="+e.table,
		"LOSS_FETCH=reliable", "LOSS_MODE=complete")
	cmd.Stdout, cmd.Stderr = e.logs, e.logs
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	conn := e.conn
	wait.Within(t, 30*time.Second, "jobs to complete while no lock can be written", func() bool {
		done, _ := redis.Int(conn.Do("SCARD", keyLossDone))
		return done >= lossConc
	})
	other, err := pgx.Connect(ctx, e.dbURL)
	require.NoError(t, err)
	defer other.Close(ctx)
	var locked int
	require.NoError(t, other.QueryRow(ctx, `SELECT count(*) FROM `+qtable+` WHERE locked_by IS NOT NULL`).Scan(&locked))
	require.Zero(t, locked, "no lock was written")
	done, err := redis.Strings(conn.Do("SMEMBERS", keyLossDone))
	require.NoError(t, err)

	require.NoError(t, cmd.Process.Signal(os.Kill))
	require.Error(t, <-exited, "killed")
	exited <- nil
	killedAt := time.Now()
	require.NoError(t, tx.Rollback(ctx))

	ids, err := redis.Strings(conn.Do("SMEMBERS", contract.KeyProcesses))
	require.NoError(t, err)
	require.Len(t, ids, 1)
	_, err = conn.Do("DEL", ids[0]) // its Sidekiq heartbeat expires
	require.NoError(t, err)
	found := jobsAmong(redistest.InProgress(t, conn, ids[0]), done)
	require.Equal(t, len(done), found, "the completed jobs, whose rows could not be deleted, are still in the in-progress list")
	// Every row is still there, unless the dead worker's backend, blocked
	// on the test's lock when its client died, writes its group now that
	// the lock is gone (PostgreSQL notices a vanished client only when it
	// next talks to it): those rows are locked or deleted for jobs that
	// are recovered below either way.

	// Two passes, an extension apart: nothing is missing, nothing killed.
	e.killedAt = killedAt
	e.reconcileKillsNothing(t, func(int, *ReconcileResult) {})

	// A new process recovers the dead one's list and runs what is left.
	e.recoverAndRunAll(t)
}
