package store

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/pgtest"
)

// The drain's group statements, without gojob's workers or Redis: rows
// pushed in groups of sqliteChunk (as a bulk push writes them), then one
// group at a time holding the locks of the next jobs in push order and the
// success deletes of jobs locked earlier, as groupCommit.write applies
// them. Run with a fixed count, e.g. -benchtime 2000x.

// benchIdentity is the lock owner of the benchmarks' rows.
const benchIdentity = "host:1234:0123456789ab"

// pushBenchRows writes n rows as bulk pushes do and returns their jids in
// push order (in no particular jid order, as real ones).
func pushBenchRows(b *testing.B, s *sqlStore, n int) []string {
	b.Helper()
	jids := make([]string, n)
	now := time.Now().UTC()
	for i := range jids {
		jids[i] = fmt.Sprintf("%024x", uint64(i)*0x9e3779b97f4a7c15)
	}
	for i := 0; i < n; i += sqliteChunk {
		var ops []*Op
		for j := i; j < min(n, i+sqliteChunk); j++ {
			at := now.Add(time.Duration(j) * 20 * time.Microsecond)
			item := fmt.Sprintf(`{"class":"Bench::Noop","args":[%d],"retry":true,"queue":"bench-x","jid":"%s","created_at":1700000000.123,"enqueued_at":1700000000.123,"durable":true}`, j, jids[j])
			ops = append(ops, &Op{kind: opUpsert, up: &UpsertParams{JobID: jids[j], JobClass: "Bench::Noop", ItemJSON: item,
				Queue: "bench-x", InsertedAt: at, AssumeDeadAt: at.Add(5 * time.Minute)}})
		}
		require.NoError(b, s.writeGroup(context.Background(), ops))
	}
	return jids
}

// lockBenchRows returns the locks of jids, taken now.
func lockBenchRows(jids []string) []LockParams {
	t := time.Now()
	locks := make([]LockParams, len(jids))
	for i, jid := range jids {
		locks[i] = LockParams{JobID: jid, LockedBy: benchIdentity, LockedAt: t, AssumeDeadAt: t.Add(5 * time.Minute)}
	}
	return locks
}

// writeDrainGroup writes locks and the deletes of the jobs locked by done
// in one group, and fails b when a write finds no row.
func writeDrainGroup(b *testing.B, s *sqlStore, locks, done []LockParams) {
	ops := make([]*Op, 0, len(locks)+len(done))
	for _, lk := range locks {
		ops = append(ops, &Op{kind: opLock, lk: lk})
	}
	for _, lk := range done {
		ops = append(ops, &Op{kind: opDelete, del: DeleteParams{JobID: lk.JobID, LockedBy: lk.LockedBy, LockedAt: lk.LockedAt}})
	}
	if err := s.writeGroup(context.Background(), ops); err != nil {
		b.Fatal(err)
	}
	for _, op := range ops {
		if !op.ok {
			b.Fatalf("%v %s: not applied", op.kind, op.jid())
		}
	}
}

// BenchmarkGroupStatement is the database's side of the drain, per
// backend and group size: each statement locks `size` jobs and deletes
// the previous statement's. Its µs/statement splits a statement's cost
// into a part per statement and a part per job
// (docs/durable.md#gojob-at-scale); client-cpu-µs/statement is the CPU
// this process spent per statement (user + system: building the
// statement, the socket, the answer; with SQLite the database's work
// too), server-cpu-µs/statement that of the PostgreSQL backend serving
// the statements when it runs on this machine; with one group in flight and the
// slots in two cohorts, 25 slots need two statements per job cycle.
//
//	go test -run '^$' -bench GroupStatement -benchtime 2000x ./durable/internal/store/
func BenchmarkGroupStatement(b *testing.B) {
	for _, be := range pgtest.Backends {
		for _, size := range []int{1, 12, 24} {
			b.Run(fmt.Sprintf("%s/%d", be.Name, size), func(b *testing.B) {
				s := openTestStore(b, be)
				jids := pushBenchRows(b, s, (b.N+1)*size)
				var prev []LockParams
				var before syscall.Rusage
				require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &before))
				serverBefore := groupBackendCPU(s)
				b.ResetTimer()
				for n := range b.N {
					locks := lockBenchRows(jids[n*size : (n+1)*size])
					writeDrainGroup(b, s, locks, prev)
					prev = locks
				}
				b.StopTimer()
				var after syscall.Rusage
				require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &after))
				cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/statement")
				b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "client-cpu-µs/statement")
				if serverBefore >= 0 {
					if serverAfter := groupBackendCPU(s); serverAfter >= 0 {
						b.ReportMetric(float64((serverAfter-serverBefore).Microseconds())/float64(b.N), "server-cpu-µs/statement")
					}
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*size), "µs/job")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// groupBackendCPU is the CPU time (user + system) of the PostgreSQL
// backend serving s's group connection, read from /proc when the server
// runs on this machine; -1 otherwise (SQLite, a remote server).
func groupBackendCPU(s *sqlStore) time.Duration {
	d, ok := s.d.(*pgDialect)
	if !ok {
		return -1
	}
	conns := d.group.AcquireAllIdle(context.Background())
	if len(conns) == 0 {
		return -1
	}
	pid := conns[0].Conn().PgConn().PID()
	for _, c := range conns {
		c.Release()
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The fields after the command's closing parenthesis; utime and stime
	// are the 14th and 15th of the line, in clock ticks (100 per second
	// on Linux).
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 13 {
		return -1
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// BenchmarkSQLiteDrainGroups is the SQLite writer alone in the shape of
// `gojob bench --durable sqlite:…` at -c 25: groups of 12 locks and the
// deletes of the jobs locked two groups earlier, one transaction each. It
// reports the process's CPU per job (user + system, so the WAL writes and
// fsyncs count), which is steadier than wall time on a shared machine, and
// the goroutines started per job.
func BenchmarkSQLiteDrainGroups(b *testing.B) {
	const group = 12
	s, _ := openSQLiteFile(b, "drain.db")
	jids := pushBenchRows(b, s, (b.N+3)*group)
	var before syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &before))
	created := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(created)
	createdBefore := created[0].Value.Uint64()
	var locked [][]LockParams
	b.ResetTimer()
	for n := range b.N + 2 {
		locked = append(locked, lockBenchRows(jids[n*group:(n+1)*group]))
		var done []LockParams
		if n >= 2 {
			done = locked[n-2]
		}
		writeDrainGroup(b, s, locked[n], done)
	}
	b.StopTimer()
	var after syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &after))
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	metrics.Read(created)
	jobs := float64((b.N + 2) * group)
	b.ReportMetric(float64(cpu.Microseconds())/jobs, "cpu-µs/job")
	b.ReportMetric(float64(created[0].Value.Uint64()-createdBefore)/jobs, "goroutines/job")
}
