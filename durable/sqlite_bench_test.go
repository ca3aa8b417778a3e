package durable

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime/metrics"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkSQLiteDrainGroups measures the SQLite writer alone in the shape
// of `gojob bench --durable sqlite:…` at -c 25: rows pushed in groups of
// sqliteChunk (as a bulk push writes them), then groups of 12 locks (the
// next jobs in push order) and 12 deletes (the jobs locked two groups
// earlier), one transaction each, as groupCommit.write applies them. The
// jids are in no particular order, as real ones. It reports the process's
// CPU per job (user + system, so the WAL writes and fsyncs count), which
// is steadier than wall time on a shared machine, and the goroutines
// started per job. Run with a fixed count, e.g. -benchtime=2000x.
func BenchmarkSQLiteDrainGroups(b *testing.B) {
	const group = 12
	path := filepath.Join(b.TempDir(), "drain.db")
	d, err := New(&Config{URLs: []string{"sqlite:" + path}, Table: uniqueTable()})
	require.NoError(b, err)
	defer d.Close()
	ctx := context.Background()
	_, err = d.Migrate(ctx)
	require.NoError(b, err)
	s := d.stores[0].(*sqlStore)
	rows := (b.N + 3) * group
	jids := make([]string, rows)
	now := time.Now().UTC()
	for i := range jids {
		jids[i] = fmt.Sprintf("%024x", uint64(i)*0x9e3779b97f4a7c15)
	}
	for i := 0; i < rows; i += sqliteChunk {
		var ops []*gcOp
		for j := i; j < min(rows, i+sqliteChunk); j++ {
			at := now.Add(time.Duration(j) * 20 * time.Microsecond)
			item := fmt.Sprintf(`{"class":"Bench::Noop","args":[%d],"retry":true,"queue":"bench-x","jid":"%s","created_at":1700000000.123,"enqueued_at":1700000000.123,"durable":true}`, j, jids[j])
			ops = append(ops, &gcOp{kind: gcUpsert, up: upsertParams{JobID: jids[j], JobClass: "Bench::Noop", ItemJSON: item,
				Queue: "bench-x", InsertedAt: at, AssumeDeadAt: at.Add(5 * time.Minute)}})
		}
		require.NoError(b, s.writeGroup(ctx, ops))
	}
	const identity = "host:1234:0123456789ab"
	lockedAt := make([]time.Time, rows)
	var before syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &before))
	created := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(created)
	createdBefore := created[0].Value.Uint64()
	b.ResetTimer()
	for n := range b.N + 2 {
		var ops []*gcOp
		t := time.Now()
		for i := n * group; i < (n+1)*group; i++ {
			lockedAt[i] = t
			ops = append(ops, &gcOp{kind: gcLock, lk: lockParams{JobID: jids[i], LockedBy: identity, LockedAt: t, AssumeDeadAt: t.Add(5 * time.Minute)}})
		}
		for i := (n - 2) * group; i >= 0 && i < (n-1)*group; i++ {
			ops = append(ops, &gcOp{kind: gcDelete, del: deleteLockedParams{JobID: jids[i], LockedBy: identity, LockedAt: lockedAt[i]}})
		}
		if err := s.writeGroup(ctx, ops); err != nil {
			b.Fatal(err)
		}
		for _, op := range ops {
			if !op.ok {
				b.Fatalf("%v %s: not applied", op.kind, op.jid())
			}
		}
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
