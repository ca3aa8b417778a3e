package durable

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/durable/internal/store"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/pgtest"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// The tests of this file make the first database unreachable while jobs
// run, for real: PostgreSQL is reached through a TCP proxy the test cuts
// (every connection dropped, new ones closed at once), and SQLite is held
// by another connection's exclusive transaction (SQLITE_BUSY, which the
// store counts as unreachable; its busy timeout is shortened).

// outage controls the first database of a test.
type outage struct {
	urls []string // the first database can be cut
	down func() error
	up   func() error
}

func newOutage(t *testing.T, be pgtest.Backend) *outage {
	t.Helper()
	urls := be.URLs(t)
	if be.Name == "sqlite" {
		return sqliteOutage(t, urls)
	}
	return postgresOutage(t, urls)
}

func postgresOutage(t *testing.T, urls []string) *outage {
	t.Helper()
	pc, err := pgx.ParseConfig(urls[0])
	require.NoError(t, err)
	network, target := "tcp", net.JoinHostPort(pc.Host, fmt.Sprint(pc.Port))
	if strings.HasPrefix(pc.Host, "/") {
		network, target = "unix", filepath.Join(pc.Host, fmt.Sprintf(".s.PGSQL.%d", pc.Port))
	}
	p := startProxy(t, network, target)
	u, err := url.Parse(urls[0])
	require.NoError(t, err)
	q := u.Query()
	q.Del("host")
	q.Del("port")
	u.RawQuery = q.Encode()
	u.Host = p.ln.Addr().String()
	return &outage{
		urls: []string{u.String(), urls[1]},
		down: func() error { p.setCut(true); return nil },
		up:   func() error { p.setCut(false); return nil },
	}
}

func sqliteOutage(t *testing.T, urls []string) *outage {
	t.Helper()
	path, _, _ := store.SQLitePath(urls[0])
	locker, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	conn, err := locker.Conn(context.Background())
	require.NoError(t, err)
	var mu sync.Mutex
	held := false
	set := func(hold bool) error {
		mu.Lock()
		defer mu.Unlock()
		if held == hold {
			return nil
		}
		stmt := "COMMIT"
		if hold {
			stmt = "BEGIN EXCLUSIVE"
		}
		_, err := conn.ExecContext(context.Background(), stmt)
		if err == nil {
			held = hold
		}
		return err
	}
	t.Cleanup(func() {
		_ = set(false)
		conn.Close()
		locker.Close()
	})
	return &outage{
		// The store gets a busy timeout of 20 ms instead of 5 s (the URL's
		// pragma wins), so that a locked database fails fast.
		urls: []string{urls[0] + "?_pragma=busy_timeout(20)", urls[1]},
		down: func() error { return set(true) },
		up:   func() error { return set(false) },
	}
}

// tcpProxy forwards connections to a database server. Cut, it drops every
// connection and closes new ones at once, as a database behind a failed
// network link does.
type tcpProxy struct {
	ln              net.Listener
	network, target string
	mu              sync.Mutex
	cut             bool
	conns           map[net.Conn]bool
	pipes           sync.WaitGroup
}

func startProxy(t *testing.T, network, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &tcpProxy{ln: ln, network: network, target: target, conns: map[net.Conn]bool{}}
	served := make(chan struct{})
	go func() {
		defer close(served)
		p.serve()
	}()
	t.Cleanup(func() {
		ln.Close()
		<-served
		p.setCut(true)
		p.pipes.Wait()
	})
	return p
}

func (p *tcpProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		p.pipes.Add(1)
		go p.pipe(c)
	}
}

// track registers a connection, or closes it when the proxy is cut.
func (p *tcpProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

func (p *tcpProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *tcpProxy) pipe(c net.Conn) {
	defer p.pipes.Done()
	s, err := net.Dial(p.network, p.target)
	if err != nil {
		p.untrack(c)
		return
	}
	if !p.track(s) {
		p.untrack(c)
		return
	}
	copied := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(s, c); copied <- struct{}{} }()
	go func() { _, _ = io.Copy(c, s); copied <- struct{}{} }()
	<-copied
	p.untrack(c, s)
	<-copied
}

func (p *tcpProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
			delete(p.conns, c)
		}
	}
}

// fastRetry makes the background retry of pending writes quick.
func fastRetry(c *Config) { c.retryMin, c.retryMax = 5*time.Millisecond, 20*time.Millisecond }

// noRetry keeps the background retry from running during a test.
func noRetry(c *Config) { c.retryMin, c.retryMax = time.Hour, time.Hour }

func waitNoPendingWrites(t *testing.T, d *Durable) {
	t.Helper()
	select {
	case <-d.pend.Emptied():
	case <-time.After(15 * time.Second):
		t.Fatalf("%d durable writes still pending", d.pend.Len())
	}
}

// The job's row is in DB1; DB1 stops answering while jobs run. The
// success delete, the failure unlock and the removal of the stale copy of
// a job pushed again into DB2 are retried until DB1 answers again; then
// no completed job's row is left and the reconciler kills nothing.
func TestOutageFinishingWritesLandWhenTheDatabaseIsBack(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		o := newOutage(t, be)
		b := setup(t, bundleOpts{urls: o.urls, configure: fastRetry})
		ctx := context.Background()
		st0 := b.d.stores[0]

		var handlerErrs []error
		s := startServer(t, b, map[string]sidekiq.HandlerFunc{"DurableJob": func(ctx context.Context, job *wire.Job) error {
			arg, _ := job.Args()[0].Str()
			switch arg {
			case "ok":
				handlerErrs = append(handlerErrs, o.down())
			case "bad":
				handlerErrs = append(handlerErrs, o.down())
				return errors.New("boom")
			}
			return nil
		}})

		// Scheduled in an hour, while DB1 answers: the row is in DB1.
		sched, err := b.client.Push(ctx, newJob(t, "DurableJob", "sched"), &sidekiq.PushOpts{In: time.Hour})
		require.NoError(t, err)
		require.NotNil(t, b.rowIn(t, 0, sched.JID))

		// A job succeeds while DB1 goes away: its delete is pending.
		ok, err := b.client.Enqueue(ctx, "", "DurableJob", "ok")
		require.NoError(t, err)
		require.Equal(t, jobOutcome{ok.JID, nil}, s.wait(t))
		require.NotNil(t, b.d.pend.Get(st0, ok.JID), "the success delete is queued")

		// DB1 is back for a while; a job fails while it goes away again: its
		// unlock (with the error) is pending.
		require.NoError(t, o.up())
		bad, err := b.client.Enqueue(ctx, "", "DurableJob", "bad")
		require.NoError(t, err)
		out := s.wait(t)
		require.Equal(t, bad.JID, out.jid)
		require.ErrorContains(t, out.err, "boom")
		require.Equal(t, store.PendingUnlock, b.d.pend.Get(st0, bad.JID).Kind)

		// An hour later, DB1 still down, the scheduler pushes the scheduled
		// job again: its row is created in DB2, DB1's copy must go. The job
		// runs and succeeds on DB2's row.
		b.clk.Advance(time.Hour)
		scheduled, err := wire.ParseJob(sched.Payload)
		require.NoError(t, err)
		_, err = b.client.Push(ctx, scheduled, &sidekiq.PushOpts{Repush: true})
		require.NoError(t, err)
		require.Equal(t, jobOutcome{sched.JID, nil}, s.wait(t))
		require.NoError(t, s.srv.Stop(ctx)) // the failed job's retry is stored when it returns
		require.Equal(t, 1, b.zcard(t, contract.KeyRetry))
		require.Equal(t, store.PendingRemove, b.d.pend.Get(st0, sched.JID).Kind)
		require.Nil(t, b.rowIn(t, 1, sched.JID), "DB2's row was deleted after the success")
		require.Equal(t, 3, b.logs.Count("warn", "retrying in the background")+b.logs.Count("warn", "is retried in the background"))

		// DB1 answers again: the loop applies the pending writes by itself.
		require.NoError(t, o.up())
		waitNoPendingWrites(t, b.d)
		require.Nil(t, b.rowIn(t, 0, ok.JID), "the completed job's row is gone")
		require.Nil(t, b.rowIn(t, 0, sched.JID), "the stale copy is gone")
		failed := b.rowIn(t, 0, bad.JID)
		require.NotNil(t, failed)
		require.Nil(t, failed.LockedBy, "the failed job's row is unlocked")
		item, err := wire.ParseJob([]byte(failed.ItemJSON))
		require.NoError(t, err)
		require.Equal(t, "boom", item.ErrorMessage())
		require.GreaterOrEqual(t, b.logs.Count("info", "pending durable row write applied"), 2)
		for _, e := range handlerErrs {
			require.NoError(t, e)
		}

		// Two passes, an extension apart: the failed job is in the retry
		// set, the others are done; nothing is killed.
		r := b.reconciler(t, nil)
		for range 2 {
			b.clk.Advance(6 * time.Minute)
			res := b.reconcile(t, r)
			require.Zero(t, res.Killed)
			require.Zero(t, res.Marked)
		}
		require.Zero(t, b.zcard(t, contract.KeyDead))
		require.Zero(t, b.deaths.count())
		require.Equal(t, 0, b.logs.Count("error", `"component":"durable`))
	})
}

// A job completes here while DB1 does not answer; DB1 comes back before
// the retry, and another process's reconciler had already given the row
// its first strike. This process's reconciler must not kill the job: it
// applies the pending delete instead. A row in the same state with no
// pending write is killed, as before.
func TestReconcilerLeavesRowsWithPendingWrites(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		o := newOutage(t, be)
		b := setup(t, bundleOpts{urls: o.urls, configure: noRetry})
		ctx := context.Background()
		st0 := b.d.stores[0]
		done, err := b.client.Enqueue(ctx, "", "DurableJob", "done")
		require.NoError(t, err)
		lost, err := b.client.Enqueue(ctx, "", "DurableJob", "lost")
		require.NoError(t, err)
		_, err = b.conn.Do("DEL", contract.QueueKey("default")) // taken by workers
		require.NoError(t, err)

		job, err := wire.ParseJob(done.Payload)
		require.NoError(t, err)
		require.NoError(t, b.d.Run(ctx, &sidekiq.Run{Job: job, Identity: "h:1:n"}, func(context.Context) error { return o.down() }))
		require.NotNil(t, b.d.pend.Get(st0, done.JID))
		require.NoError(t, o.up())

		for _, jid := range []string{done.JID, lost.JID} {
			rw := b.rowIn(t, 0, jid)
			ok, err := st0.TouchMany(ctx, []store.TouchParams{{JobID: jid, Expect: rw.AssumeDeadAt, AssumeDeadAt: b.clk.Now(), MissingAt: ptr(b.clk.Now())}})
			require.NoError(t, err)
			require.Equal(t, []bool{true}, ok)
		}
		b.clk.Advance(time.Minute)
		res := b.reconcile(t, b.reconciler(t, nil))
		require.Equal(t, []string{lost.JID}, res.KilledJIDs, "only the job with no pending write is killed")
		require.Equal(t, 1, res.Changed)
		require.Nil(t, b.rowIn(t, 0, done.JID), "the pending delete was applied")
		require.Zero(t, b.d.pend.Len())
		dead := b.deadJobs(t)
		require.Len(t, dead, 1)
		require.Equal(t, lost.JID, dead[0].JID())
	})
}

// A job pushed again while DB1 was down has its row in DB2 and a stale
// copy in DB1. DB1 comes back and the job runs before the background
// retry: the lock first removes the stale copy, then locks DB2's row, so
// that the success leaves no row anywhere.
func TestLockAppliesThePendingRemovalFirst(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		o := newOutage(t, be)
		b := setup(t, bundleOpts{urls: o.urls, configure: noRetry})
		ctx := context.Background()
		st0 := b.d.stores[0]
		res, err := b.client.Push(ctx, newJob(t, "DurableJob"), &sidekiq.PushOpts{In: time.Hour})
		require.NoError(t, err)
		job, err := wire.ParseJob(res.Payload)
		require.NoError(t, err)

		require.NoError(t, o.down())
		b.clk.Advance(time.Hour)
		_, err = b.client.Push(ctx, job, &sidekiq.PushOpts{Repush: true})
		require.NoError(t, err)
		require.NotNil(t, b.rowIn(t, 1, res.JID))
		require.Equal(t, store.PendingRemove, b.d.pend.Get(st0, res.JID).Kind)
		require.NoError(t, o.up())

		require.NoError(t, b.d.Run(ctx, &sidekiq.Run{Job: job, Identity: "h:1:n"}, func(context.Context) error { return nil }))
		require.Nil(t, b.rowIn(t, 0, res.JID))
		require.Nil(t, b.rowIn(t, 1, res.JID))
		require.Zero(t, b.d.pend.Len())

		// A push again of a jid whose delete is pending applies the delete
		// first, then writes the new push's row, which is kept.
		again, err := b.client.Enqueue(ctx, "", "DurableJob", 2)
		require.NoError(t, err)
		j2, err := wire.ParseJob(again.Payload)
		require.NoError(t, err)
		require.NoError(t, b.d.Run(ctx, &sidekiq.Run{Job: j2, Identity: "h:1:n"}, func(context.Context) error { return o.down() }))
		require.Equal(t, store.PendingDelete, b.d.pend.Get(st0, again.JID).Kind)
		require.NoError(t, o.up())
		b.clk.Advance(time.Hour)
		_, err = b.client.Push(ctx, j2, &sidekiq.PushOpts{Repush: true})
		require.NoError(t, err)
		require.Zero(t, b.d.pend.Len())
		rw := b.rowIn(t, 0, again.JID)
		require.NotNil(t, rw, "the new push's row")
		require.Nil(t, rw.LockedBy)
		require.True(t, micro(b.clk.Now().Add(defaultExtension)).Equal(rw.AssumeDeadAt))
	})
}

// Close tries the pending writes once more: those whose database answers
// land, the others are logged at error level with jid and database.
func TestCloseTriesPendingWritesOnceAndLogsTheRest(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		o := newOutage(t, be)
		table := uniqueTable()
		ctx := context.Background()
		complete := func(b *testBundle) string {
			res, err := b.client.Enqueue(ctx, "", "DurableJob", 1)
			require.NoError(t, err)
			job, err := wire.ParseJob(res.Payload)
			require.NoError(t, err)
			require.NoError(t, b.d.Run(ctx, &sidekiq.Run{Job: job, Identity: "h:1:n"}, func(context.Context) error { return o.down() }))
			require.Equal(t, 1, b.d.pend.Len())
			return res.JID
		}
		// Close closed the bundle's databases: read through a new Durable.
		rowAfterClose := func(jid string) *store.Row {
			return setup(t, bundleOpts{urls: o.urls, table: table, configure: noRetry}).rowIn(t, 0, jid)
		}

		// DB1 still down at shutdown.
		b := setup(t, bundleOpts{urls: o.urls, table: table, configure: noRetry})
		jid := complete(b)
		err := b.d.Close()
		require.ErrorIs(t, err, store.ErrPendingWrites)
		require.Equal(t, 1, b.logs.Count("error", "still pending at shutdown"))
		require.Equal(t, 1, b.logs.Count("error", `"jid":"`+jid+`"`))
		require.Equal(t, 1, b.logs.Count("error", `"database":"`+b.d.stores[0].Name()+`"`))
		require.NoError(t, b.d.Close(), "a second Close does nothing")
		// A write that fails after Stop is logged, not queued.
		b.d.pend.Add(&store.PendingWrite{Store: b.d.stores[0], JID: "late", Kind: store.PendingRemove})
		require.Zero(t, b.d.pend.Len())
		require.Equal(t, 1, b.logs.Count("error", "after shutdown"))
		require.NoError(t, o.up())
		require.NotNil(t, rowAfterClose(jid), "left for the operator")

		// DB1 back before shutdown: Close applies the write.
		b2 := setup(t, bundleOpts{urls: o.urls, table: table, configure: noRetry})
		jid2 := complete(b2)
		require.NoError(t, o.up())
		require.NoError(t, b2.d.Close())
		require.Nil(t, rowAfterClose(jid2))
		require.Equal(t, 0, b2.logs.Count("error", ""))
	})
}
