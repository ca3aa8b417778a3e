package durable

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/durable/internal/store"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/pgtest"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// dueScenario is a table of overdue rows whose jobs are where a healthy
// system keeps them, next to a large retry set of unrelated jobs.
type dueScenario struct {
	retryExact   int // in the retry set at the row's base (found there before)
	retryFailed  int // failed with retry_count 2: in the retry set within the default delay
	queued       int // waiting in their queue since the push
	dead         int // retries exhausted: in the dead set right after the failure
	missing      int // nowhere (first strike)
	retryFillers int // unrelated members of the retry set
}

func (s dueScenario) rows() int { return s.retryExact + s.retryFailed + s.queued + s.dead + s.missing }

// build writes the rows (InsertMany, 1000 at a time) and the Redis side,
// then moves the clock past every deadline.
func (s dueScenario) build(t testing.TB, b *testBundle) {
	t.Helper()
	ctx := context.Background()
	conn := b.pool.Get()
	defer conn.Close()
	ext := defaultExtension
	var ps []*insertParams
	flush := func() {
		_, errs := b.d.insertMany(ctx, ps)
		for _, err := range errs {
			require.NoError(t, err)
		}
		ps = ps[:0]
	}
	add := func(job *wire.Job) {
		ps = append(ps, &insertParams{Job: job})
		if len(ps) == 1000 {
			flush()
		}
	}
	pipe := 0
	send := func(cmd string, args ...any) {
		require.NoError(t, conn.Send(cmd, args...))
		if pipe++; pipe == 1000 {
			_, err := conn.Do("")
			require.NoError(t, err)
			pipe = 0
		}
	}
	base := b.clk.Now()
	for i := range s.retryExact {
		job := newJob(t, "DurableJob", i)
		at := base.Add(time.Duration(i%3600) * time.Second)
		job.Set("at", rubyjson.FloatValue(contract.EpochSeconds(at))) // deadline = at + ext
		add(job)
		j := job.Clone()
		j.Delete("at")
		send("ZADD", contract.KeyRetry, contract.Score(at), j.Bytes())
	}
	for i := range s.retryFailed {
		job := newJob(t, "DurableJob", i)
		job.Set("retry_count", rubyjson.IntValue(2))
		job.Set("error_class", rubyjson.StringValue("RuntimeError"))
		add(job) // deadline = failure time (now) + ext
		send("ZADD", contract.KeyRetry, contract.Score(base.Add(3*3*3*3*time.Second+15*time.Second+time.Duration(i%30)*time.Second)), job.Bytes())
	}
	for i := range s.queued {
		job := newJob(t, "DurableJob", i)
		job.SetQueue("due")
		add(job)
		job.Set("enqueued_at", contract.TimestampValue(base, wire.Version7))
		send("LPUSH", contract.QueueKey("due"), job.Bytes())
	}
	for i := range s.dead {
		job := newJob(t, "DurableJob", i)
		job.Set("error_class", rubyjson.StringValue("RuntimeError"))
		add(job)
		send("ZADD", contract.KeyDead, contract.Score(base.Add(10*time.Millisecond)), job.Bytes())
	}
	for i := range s.missing {
		add(newJob(t, "DurableJob", i))
	}
	flush()
	for i := 0; i < s.retryFillers; i += 1000 {
		args := []any{contract.KeyRetry}
		for k, p := range filler(min(1000, s.retryFillers-i), "Filler") {
			args = append(args, contract.Score(base.Add(time.Duration(i+k)*time.Second)), p)
		}
		send("ZADD", args...)
	}
	_, err := conn.Do("")
	require.NoError(t, err)
	b.clk.Advance(ext + time.Hour + 2*time.Minute)
}

// redisCalls sums the calls of every command in INFO commandstats.
func redisCalls(t testing.TB, conn redis.Conn) (total int, byCmd map[string]int) {
	t.Helper()
	info, err := redis.String(conn.Do("INFO", "commandstats"))
	require.NoError(t, err)
	byCmd = map[string]int{}
	for _, line := range strings.Split(info, "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, stats, _ := strings.Cut(rest, ":calls=")
		n, err := strconv.Atoi(stats[:strings.IndexByte(stats, ',')])
		require.NoError(t, err)
		byCmd[name] = n
		total += n
	}
	return total, byCmd
}

// A pass whose rows are all where a healthy system keeps them costs the
// same Redis commands whatever the size of the retry set: it looks each
// row up where it should be, and never streams the sets.
func TestReconcilerCommandsDoNotGrowWithTheRetrySet(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		pass := func(fillers int) (int, map[string]int, *ReconcileResult) {
			urls := be.URLs(t)
			b := setup(t, bundleOpts{urls: urls[:1]})
			dueScenario{retryExact: 100, retryFailed: 100, queued: 100, dead: 50, retryFillers: fillers}.build(t, b)
			before, bcmds := redisCalls(t, b.conn)
			res := b.reconcile(t, b.reconciler(t, nil))
			after, acmds := redisCalls(t, b.conn)
			for k, v := range bcmds {
				acmds[k] -= v
			}
			return after - before - 2, acmds, res // the two INFO calls
		}
		small, _, res := pass(1_000)
		require.Equal(t, 350, res.Checked)
		require.Equal(t, 200, res.Retrying)
		require.Equal(t, 100, res.Queued)
		require.Equal(t, 50, res.AlreadyDead)
		require.Zero(t, res.Marked+res.Killed+res.Changed+res.Failed)
		large, cmds, res := pass(50_000)
		require.Equal(t, 200, res.Retrying)
		require.Equal(t, small, large, "commands per pass with 1,000 and 50,000 retry entries: %v", cmds)
		require.Zero(t, cmds["zscan"], "no set is streamed")
		require.Zero(t, cmds["scan"], "no keyspace scan")
		// About three lookups per row (retry, schedule, dead windows) at
		// most, plus a few per page.
		require.Less(t, large, 3*350+50, "%v", cmds)
	})
}

// BenchmarkReconcilePass times one pass over GOJOB_BENCH_DUE overdue rows
// (default 100,000: 40% in the retry set, 25% queued, 20% dead, 10%
// failed and retrying, 5% missing) next to a retry set of
// GOJOB_BENCH_RETRY members (default 1,000,000), on PostgreSQL (or SQLite
// with GOJOB_BENCH_DB=sqlite). The missing rows make the pass stream the
// queue and the sets once (resolveRest). Run it with -benchtime=1x:
//
//	go test -run '^$' -bench ReconcilePass -benchtime=1x ./durable/
func BenchmarkReconcilePass(b *testing.B) {
	due := envOr("GOJOB_BENCH_DUE", 100_000)
	fillers := envOr("GOJOB_BENCH_RETRY", 1_000_000)
	be := pgtest.Backends[0]
	if os.Getenv("GOJOB_BENCH_DB") == "sqlite" {
		be = pgtest.Backends[1]
	}
	for b.Loop() {
		b.StopTimer()
		urls := be.URLs(b)
		tb := setupB(b, urls[:1])
		sc := dueScenario{retryExact: due * 40 / 100, retryFailed: due * 10 / 100, queued: due * 25 / 100, dead: due * 20 / 100,
			missing: due * 5 / 100, retryFillers: fillers}
		sc.build(b, tb)
		before, _ := redisCalls(b, tb.conn)
		r, err := NewReconciler(&ReconcilerConfig{Durable: tb.d, API: tb.api, PageSize: 2000})
		require.NoError(b, err)
		stmts := tb.d.Stats().Statements
		b.StartTimer()
		start := time.Now()
		res, err := r.RunOnce(context.Background())
		elapsed := time.Since(start)
		b.StopTimer()
		require.NoError(b, err)
		after, _ := redisCalls(b, tb.conn)
		require.GreaterOrEqual(b, res.Checked, sc.rows()) // a row whose retry is overdue is found again after its touch
		b.ReportMetric(elapsed.Seconds(), "s/pass")
		b.ReportMetric(float64(after-before-1), "redis-commands/pass")
		b.ReportMetric(float64(tb.d.Stats().Statements-stmts), "sql-statements/pass")
		b.Logf("%s: %d due rows, %d retry members: pass %.2f s, %+v", be.Name, sc.rows(), sc.retryExact+sc.retryFailed+fillers, elapsed.Seconds(), res.ReconcileCounts)
		b.StartTimer()
	}
}

func envOr(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}

// setupB is setup for a benchmark, with the logs discarded (a pass logs
// every strike).
func setupB(b *testing.B, urls []string) *testBundle {
	b.Helper()
	return setup(b, bundleOpts{urls: urls, configure: func(c *Config) { c.Logger = zerolog.Nop() }})
}

// insertMany writes many jobs' rows as a bulk push does: each database
// gets the rows still unwritten in one group, in list order.
func (d *Durable) insertMany(ctx context.Context, ps []*insertParams) ([]*insertResult, []error) {
	jobs, ups := make([]*wire.Job, len(ps)), make([]store.UpsertParams, len(ps))
	rowErrs := make([]error, len(ps))
	for i, p := range ps {
		ups[i], rowErrs[i] = d.rowFor(p)
		jobs[i] = p.Job
	}
	return d.insertRows(ctx, jobs, ups, rowErrs)
}
