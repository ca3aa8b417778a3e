package durable

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkGroupStatement is the database's side of the drain, without
// gojob's workers or Redis: one group statement in flight, each carrying
// the locks of `size` jobs and the success deletes of the previous
// group's, over a table of 50,000 pushed rows. Its µs/statement splits a
// statement's cost into a part per statement and a part per job
// (docs/durable.md#gojob-at-scale); with one group in flight and the
// slots in two cohorts, 25 slots need two statements per job cycle.
//
//	go test -run '^$' -bench GroupStatement -benchtime 2000x ./durable/
func BenchmarkGroupStatement(b *testing.B) {
	for _, be := range backends {
		for _, size := range []int{1, 12, 24} {
			b.Run(fmt.Sprintf("%s/%d", be.name, size), func(b *testing.B) {
				urls := be.urls(b)
				tb := setupB(b, urls[:1])
				s := tb.d.stores[0].(*sqlStore)
				ctx := context.Background()
				const rows = 50_000
				now := time.Now().UTC()
				jid := func(i int) string { return fmt.Sprintf("%024x", i*7919) }
				for start := 0; start < rows; start += 500 {
					ops := make([]*gcOp, 0, 500)
					for i := start; i < start+500; i++ {
						ops = append(ops, &gcOp{kind: gcUpsert, up: upsertParams{
							JobID: jid(i), JobClass: "BenchJob", Queue: "bench", InsertedAt: now, AssumeDeadAt: now.Add(5 * time.Minute),
							ItemJSON: `{"retry":true,"queue":"bench","class":"BenchJob","args":[7],"jid":"` + jid(i) + `","created_at":1795492991.0632136,"enqueued_at":1795492991.0633917}`,
						}})
					}
					require.NoError(b, s.writeGroup(ctx, ops))
				}
				next := 0
				var prev []lockParams
				b.ResetTimer()
				for b.Loop() {
					if next+size > rows {
						b.Fatalf("more statements than the table's rows allow: use -benchtime %dx or less", rows/size)
					}
					ops := make([]*gcOp, 0, 2*size)
					locks := make([]lockParams, 0, size)
					at := time.Now().UTC().Truncate(time.Microsecond)
					for i := next; i < next+size; i++ {
						lk := lockParams{JobID: jid(i), LockedBy: "bench:1:abc", LockedAt: at, AssumeDeadAt: at.Add(5 * time.Minute)}
						locks = append(locks, lk)
						ops = append(ops, &gcOp{kind: gcLock, lk: lk})
					}
					for _, lk := range prev {
						ops = append(ops, &gcOp{kind: gcDelete, del: deleteLockedParams{JobID: lk.JobID, LockedBy: lk.LockedBy, LockedAt: lk.LockedAt}})
					}
					require.NoError(b, s.writeGroup(ctx, ops))
					for _, op := range ops {
						if !op.ok {
							b.Fatalf("%v of %s found no row", op.kind, op.jid())
						}
					}
					next += size
					prev = locks
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/statement")
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*size), "µs/job")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
