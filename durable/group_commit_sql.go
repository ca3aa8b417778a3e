package durable

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"time"
)

// The group statements of each dialect. A group holds each jid at most
// once (groupCommit.take), so the statements never touch a row twice.

// pgGroupSQL writes a whole group in one statement: data-modifying CTEs
// over arrays (unnest), one per kind of write, with the same conditions as
// the single-row statements (qUpsert, qLock, qDeleteLocked). Every part
// runs, with empty arrays when the group has no write of its kind, so the
// text never changes and pgx keeps it prepared per connection.
const pgGroupSQL = `WITH
ups AS (
 INSERT INTO %[1]s AS d (job_id, job_class, job_item_json, queue, inserted_at, assume_dead_at, missing_at)
 SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[], $7::timestamptz[])
 ON CONFLICT (job_id) DO UPDATE SET assume_dead_at = excluded.assume_dead_at, job_item_json = excluded.job_item_json,
 queue = excluded.queue, missing_at = excluded.missing_at, locked_by = NULL, locked_at = NULL
 RETURNING d.job_id, d.inserted_at),
lck AS (
 UPDATE %[1]s AS d SET locked_by = x.locked_by, locked_at = x.locked_at, assume_dead_at = x.assume_dead_at, missing_at = NULL
 FROM unnest($8::text[], $9::text[], $10::timestamptz[], $11::timestamptz[]) AS x(job_id, locked_by, locked_at, assume_dead_at)
 WHERE d.job_id = x.job_id
 RETURNING d.job_id),
del AS (
 DELETE FROM %[1]s AS d USING unnest($12::text[], $13::text[], $14::timestamptz[]) AS x(job_id, locked_by, locked_at)
 WHERE d.job_id = x.job_id AND d.locked_by = x.locked_by AND d.locked_at = x.locked_at
 RETURNING d.job_id)
SELECT 1, job_id, inserted_at FROM ups
UNION ALL SELECT 2, job_id, NULL FROM lck
UNION ALL SELECT 3, job_id, NULL FROM del`

// groupOps is a group split by kind.
type groupOps struct {
	ups, lcks, dels []*gcOp
	byJID           map[string]*gcOp
}

// splitGroupPG splits a group for PostgreSQL's statement: the upserts in
// queue order, the locks and deletes sorted by jid.
//
// Upserts in queue order give a bulk push's new rows heap places in push
// order. Jobs are fetched about in push order, so the locks and deletes
// of a drain's group then fall on a few neighbouring heap pages instead
// of one page each (sorted by jid, a push of 1000 rows was spread over
// all of its pages). Locks and deletes stay sorted, so two processes
// writing the same rows take their row locks in the same order; a group
// that still deadlocks with another statement (the same jids upserted in
// two orders at once, say) gets PostgreSQL's deadlock error, an SQL
// error, and groupCommit.write applies its ops one by one.
func splitGroupPG(ops []*gcOp) *groupOps {
	g := splitGroupInOrder(ops)
	byJID := func(a, b *gcOp) int { return strings.Compare(a.jid(), b.jid()) }
	slices.SortFunc(g.lcks, byJID)
	slices.SortFunc(g.dels, byJID)
	return g
}

// splitGroupInOrder splits a group by kind, each in queue order.
func splitGroupInOrder(ops []*gcOp) *groupOps {
	g := &groupOps{byJID: make(map[string]*gcOp, len(ops))}
	for _, op := range ops {
		op.ok = false
		g.byJID[op.jid()] = op
		switch op.kind {
		case gcUpsert:
			g.ups = append(g.ups, op)
		case gcLock:
			g.lcks = append(g.lcks, op)
		case gcDelete:
			g.dels = append(g.dels, op)
		}
	}
	return g
}

// answer records a returned row: created for an upsert (inserted_at is the
// one this push wrote), found or deleted otherwise.
func (g *groupOps) answer(jid string, inserted time.Time, insertedValid bool) {
	op := g.byJID[jid]
	if op == nil {
		return
	}
	if op.kind == gcUpsert {
		op.ok = insertedValid && inserted.Equal(micro(op.up.InsertedAt))
		return
	}
	op.ok = true
}

// groupSlots is 1: one group statement in flight at a time. Measured on
// the bench (2 cores shared by gojob, PostgreSQL and Redis), two or more
// groups at once split the same writes into smaller statements, and each
// statement costs both processes a fixed amount of CPU that the job's
// writes do not: 1 slot drained faster than 2, 4 or 8.
func (d pgDialect) groupSlots() int { return 1 }

func (d pgDialect) writeGroup(ctx context.Context, s *sqlStore, ops []*gcOp) error {
	g := splitGroupPG(ops)
	ups, lcks, dels := g.ups, g.lcks, g.dels
	// The 14 arrays in one buffer, each parameter a piece of it (a piece
	// cut before the buffer grew keeps the old array, with its bytes).
	buf := make([]byte, 0, 14*20+len(ups)*256+len(lcks)*96+len(dels)*80)
	params := make([][]byte, 0, 14)
	text := func(n int, str func(i int) string) {
		from := len(buf)
		buf = pgTextArray(buf, n, str)
		params = append(params, buf[from:len(buf):len(buf)])
	}
	times := func(n int, at func(i int) (time.Time, bool)) {
		from := len(buf)
		buf = pgTimeArray(buf, n, at)
		params = append(params, buf[from:len(buf):len(buf)])
	}
	text(len(ups), func(i int) string { return ups[i].up.JobID })
	text(len(ups), func(i int) string { return ups[i].up.JobClass })
	text(len(ups), func(i int) string { return ups[i].up.ItemJSON })
	text(len(ups), func(i int) string { return ups[i].up.Queue })
	times(len(ups), func(i int) (time.Time, bool) { return ups[i].up.InsertedAt, true })
	times(len(ups), func(i int) (time.Time, bool) { return ups[i].up.AssumeDeadAt, true })
	times(len(ups), func(i int) (time.Time, bool) {
		if m := ups[i].up.MissingAt; m != nil {
			return *m, true
		}
		return time.Time{}, false
	})
	text(len(lcks), func(i int) string { return lcks[i].lk.JobID })
	text(len(lcks), func(i int) string { return lcks[i].lk.LockedBy })
	times(len(lcks), func(i int) (time.Time, bool) { return lcks[i].lk.LockedAt, true })
	times(len(lcks), func(i int) (time.Time, bool) { return lcks[i].lk.AssumeDeadAt, true })
	text(len(dels), func(i int) string { return dels[i].del.JobID })
	text(len(dels), func(i int) string { return dels[i].del.LockedBy })
	times(len(dels), func(i int) (time.Time, bool) { return dels[i].del.LockedAt, true })
	s.counted(1)
	return s.pgGroup.exec(ctx, s.qGroup, params, d.isConnError, func(vals [][]byte) error {
		if len(vals) != 3 {
			return errPGGroupAnswer
		}
		kind, err := pgDecodeInt4(vals[0])
		if err != nil {
			return err
		}
		op := g.byJID[string(vals[1])]
		if op == nil || int32(op.kind) != kind {
			return nil
		}
		if op.kind != gcUpsert {
			op.ok = true
			return nil
		}
		if vals[2] != nil {
			inserted, err := pgDecodeTimestamptz(vals[2])
			if err != nil {
				return err
			}
			op.ok = inserted.Equal(micro(op.up.InsertedAt))
		}
		return nil
	})
}

func (sqliteDialect) groupSlots() int { return 1 } // SQLite's single writer

// sqliteChunk bounds the rows per statement (SQLite allows 32,766
// parameters; an upsert row takes 7).
const sqliteChunk = 500

// writeGroup applies a group in one transaction of multi-row statements:
// an INSERT … VALUES … ON CONFLICT for the upserts, an UPDATE … FROM
// (VALUES …) for the locks and a DELETE … WHERE (…) IN (VALUES …) for the
// deletes, each only when the group has writes of its kind.
//
// The writes go in queue order, not sorted by jid as for PostgreSQL: the
// transaction holds SQLite's one write lock from its start (BEGIN
// IMMEDIATE, openSQLite's _txlock), so two groups cannot deadlock, and new
// rows get their rowids, which order the table's pages, in push order.
// Jobs are fetched about in push order, so the rows a group locks or
// deletes then sit on a few neighbouring pages; sorted by jid, a bulk
// push's rows were spread over all of its pages, and every group rewrote
// most of them (BenchmarkSQLiteDrainGroups: 35.6 WAL frames per group of
// 12 locks and 12 deletes, 22.0 in push order).
//
// The statements are prepared once per row count (sqliteStmts): parsing
// and planning a statement of a dozen rows costs SQLite (compiled to Go)
// about as much as running it. Row counts come in a few sizes
// (sqliteSizes): a group of locks or deletes is padded to the next size
// with rows of NULLs, which match no row; upserts, which cannot be padded,
// are cut into statements of those sizes.
//
// The group runs under a context that is never cancelled. The one wait in
// it is for the write lock at BEGIN IMMEDIATE, which busy_timeout bounds
// (openSQLite sets it no longer than Config.OpTimeout) and which ends in
// SQLITE_BUSY, a connection error; after it, in WAL mode, nothing waits for
// another connection. A cancellable context costs a watcher goroutine per
// statement in database/sql and in the driver (the transaction's, each
// statement's interrupt, the rows'), four or five per group.
func (d sqliteDialect) writeGroup(ctx context.Context, s *sqlStore, ops []*gcOp) error {
	ctx = context.WithoutCancel(ctx)
	g := splitGroupInOrder(ops)
	type part struct {
		kind gcKind
		ops  []*gcOp
		size int // the statement's rows: len(ops) or more (padding)
	}
	var parts []part
	for rest := g.ups; len(rest) > 0; {
		n := sqliteSizeBelow(len(rest))
		parts = append(parts, part{gcUpsert, rest[:n], n})
		rest = rest[n:]
	}
	for _, k := range []struct {
		kind gcKind
		ops  []*gcOp
	}{{gcLock, g.lcks}, {gcDelete, g.dels}} {
		for chunk := range slices.Chunk(k.ops, sqliteChunk) {
			parts = append(parts, part{k.kind, chunk, sqliteSizeAbove(len(chunk))})
		}
	}
	// Prepare before the transaction takes the connection.
	stmts := make([]*sql.Stmt, len(parts))
	for i, p := range parts {
		st, err := s.sqliteStmt(ctx, p.kind, p.size)
		if err != nil {
			return err
		}
		stmts[i] = st
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for i, p := range parts {
		args := sqliteArgs(s, p.kind, p.ops, p.size)
		rows, err := tx.StmtContext(ctx, stmts[i]).QueryContext(ctx, args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var jid string
			var inserted dbTime
			if p.kind == gcUpsert {
				err = rows.Scan(&jid, &inserted)
			} else {
				err = rows.Scan(&jid)
			}
			if err != nil {
				rows.Close()
				return err
			}
			g.answer(jid, inserted.Time, inserted.Valid)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	if s.ckpt != nil {
		s.ckpt.committed()
	}
	s.counted(len(parts))
	return nil
}

// sqliteSizes are the row counts of the group statements SQLite keeps
// prepared: steps of at most 1.5x up to sqliteChunk.
var sqliteSizes = []int{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, sqliteChunk}

// sqliteSizeAbove is the smallest size that holds n rows (n <= sqliteChunk).
func sqliteSizeAbove(n int) int {
	i, _ := slices.BinarySearch(sqliteSizes, n)
	return sqliteSizes[min(i, len(sqliteSizes)-1)]
}

// sqliteSizeBelow is the largest size not above n (n >= 1).
func sqliteSizeBelow(n int) int {
	i, found := slices.BinarySearch(sqliteSizes, n)
	if found {
		return n
	}
	return sqliteSizes[max(i-1, 0)]
}

// sqliteArgs are the parameters of a group statement of kind for ops,
// padded with NULLs to size rows.
func sqliteArgs(s *sqlStore, kind gcKind, ops []*gcOp, size int) []any {
	var cols int
	switch kind {
	case gcUpsert:
		cols = 7
	case gcLock:
		cols = 4
	default:
		cols = 3
	}
	args := make([]any, 0, cols*size)
	for _, op := range ops {
		switch kind {
		case gcUpsert:
			p := op.up
			args = append(args, p.JobID, p.JobClass, p.ItemJSON, p.Queue, s.t(p.InsertedAt), s.t(p.AssumeDeadAt), s.tp(p.MissingAt))
		case gcLock:
			p := op.lk
			args = append(args, p.JobID, p.LockedBy, s.t(p.LockedAt), s.t(p.AssumeDeadAt))
		default:
			p := op.del
			args = append(args, p.JobID, p.LockedBy, s.t(p.LockedAt))
		}
	}
	for len(args) < cols*size {
		args = append(args, nil)
	}
	return args
}

// sqliteGroupSQL is the group statement of kind for rows rows.
//
// The lock says OR FAIL. A statement that may change several rows and may
// stop on a constraint halfway keeps a statement journal, a copy of every
// page it touches, to undo its own part inside the transaction; SQLite
// leaves the journal out when a conflict algorithm other than ABORT is
// given ("Statement Journal Files" in SQLite's tempfiles.html; FAIL is
// described in lang_conflict.html). Nothing here needs the undo:
// writeGroup rolls the whole transaction back on any error, and the group
// is then retried op by op (groupCommit.write). The copies cost the
// writer about a tenth of its CPU per job in the drain. (The upsert's DO
// UPDATE keeps its journal whatever the INSERT says, so it is left as it
// was.)
func sqliteGroupSQL(table string, kind gcKind, rows int) string {
	switch kind {
	case gcUpsert:
		return `INSERT INTO ` + table + ` (job_id, job_class, job_item_json, queue, inserted_at, assume_dead_at, missing_at) VALUES ` +
			placeholders(rows, 7) + `
ON CONFLICT (job_id) DO UPDATE SET assume_dead_at = excluded.assume_dead_at, job_item_json = excluded.job_item_json,
queue = excluded.queue, missing_at = excluded.missing_at, locked_by = NULL, locked_at = NULL
RETURNING job_id, inserted_at`
	case gcLock:
		return `UPDATE OR FAIL ` + table + ` SET locked_by = x.column2, locked_at = x.column3, assume_dead_at = x.column4, missing_at = NULL
FROM (VALUES ` + placeholders(rows, 4) + `) AS x WHERE ` + table + `.job_id = x.column1 RETURNING ` + table + `.job_id`
	}
	return `DELETE FROM ` + table + ` WHERE (job_id, locked_by, locked_at) IN (VALUES ` + placeholders(rows, 3) + `) RETURNING job_id`
}

// sqliteStmt returns the prepared group statement of kind for rows rows.
func (s *sqlStore) sqliteStmt(ctx context.Context, kind gcKind, rows int) (*sql.Stmt, error) {
	key := sqliteStmtKey{kind, rows}
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	if st := s.stmts[key]; st != nil {
		return st, nil
	}
	st, err := s.db.PrepareContext(ctx, sqliteGroupSQL(s.table, kind, rows))
	if err != nil {
		return nil, err
	}
	if s.stmts == nil {
		s.stmts = map[sqliteStmtKey]*sql.Stmt{}
	}
	s.stmts[key] = st
	return st, nil
}

type sqliteStmtKey struct {
	kind gcKind
	rows int
}

// placeholders returns "(?, ?), (?, ?)" for rows × cols.
func placeholders(rows, cols int) string {
	one := "(" + strings.Repeat("?, ", cols-1) + "?)"
	var b strings.Builder
	b.Grow(rows * (len(one) + 2))
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(one)
	}
	return b.String()
}
