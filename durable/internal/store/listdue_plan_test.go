package store

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/pgtest"
)

// The reconciler reads the due rows a page at a time; the page after a
// row must start at that row in the due index and stop at the limit, or a
// pass over n due rows reads about n²/(2·limit) of them. Each engine is
// asked for its plan with the sequential scan and the sort ruled out where
// it has the choice (PostgreSQL), so that the answer does not depend on
// the table's size or statistics: the cursor must be an index condition.
func TestListDueNextPageIsAnIndexRange(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		ctx := context.Background()
		s := openTestStore(t, be)
		args := []any{s.t(testNow), s.t(testNow), "j", 10}
		var plan []string
		switch d := s.d.(type) {
		case *sqliteDialect:
			rows, err := d.db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+s.qListAfter, args...)
			require.NoError(t, err)
			defer rows.Close()
			for rows.Next() {
				var id, parent, unused int
				var detail string
				require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
				plan = append(plan, detail)
			}
			require.NoError(t, rows.Err())
			text := strings.Join(plan, "\n")
			require.Contains(t, text, "(assume_dead_at,job_id)>(?,?)", "the cursor is a range of the due index:\n%s", text)
			require.NotContains(t, text, "TEMP B-TREE", "no sort of the rows after the cursor:\n%s", text)
		case *pgDialect:
			tx, err := d.pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx)
			_, err = tx.Exec(ctx, "SET LOCAL enable_seqscan = off")
			require.NoError(t, err)
			_, err = tx.Exec(ctx, "SET LOCAL enable_sort = off")
			require.NoError(t, err)
			rows, err := tx.Query(ctx, "EXPLAIN "+s.qListAfter, args...)
			require.NoError(t, err)
			for rows.Next() {
				var line string
				require.NoError(t, rows.Scan(&line))
				plan = append(plan, line)
			}
			require.NoError(t, rows.Err())
			text := strings.Join(plan, "\n")
			require.Regexp(t, `Index Cond: .*ROW\(assume_dead_at, job_id\) >`, text, "the cursor is an index condition:\n%s", text)
		default:
			t.Fatalf("no plan check for %T", s.d)
		}
	})
}
