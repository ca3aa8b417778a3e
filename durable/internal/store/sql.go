package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// dialect is what differs between PostgreSQL and SQLite: the client (pgx
// for PostgreSQL, database/sql for SQLite), the placeholders, how a time
// is passed, the DDL and the group statements.
type dialect interface {
	kind() string
	// rebind turns the ? placeholders into the dialect's.
	rebind(q string) string
	// timeArg is how a time is passed as a parameter.
	timeArg(t time.Time) any
	// exec runs a statement and returns the rows it affected.
	exec(ctx context.Context, q string, args ...any) (int64, error)
	// each runs a query and calls row with the Scan of each row.
	each(ctx context.Context, q string, args []any, row func(scan func(dest ...any) error) error) error
	// migrate creates or upgrades the table.
	migrate(ctx context.Context) (*MigrateOutcome, error)
	isConnError(err error) bool
	// connFailed is told of each connection error.
	connFailed()
	// writeGroup applies a group of hot writes (see group.go) in one go
	// and sets each op's answer; an error means none was applied.
	writeGroup(ctx context.Context, s *sqlStore, ops []*Op) error
	// deletesUnlocked reports whether writeGroup writes the deletes that
	// replaced a lock (Op.anyLock).
	deletesUnlocked() bool
	close() error
}

// rowIter is the rows of a query, as both drivers give them.
type rowIter interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// scanRows calls row with the Scan of each row of rs: the dialects' each.
func scanRows(rs rowIter, row func(scan func(dest ...any) error) error) error {
	for rs.Next() {
		if err := row(rs.Scan); err != nil {
			return err
		}
	}
	return rs.Err()
}

// groupSlots is how many groups a store writes at once: 1. SQLite has a
// single writer. On PostgreSQL, measured on the bench (2 cores shared by
// gojob, PostgreSQL and Redis), two or more groups at once split the same
// writes into smaller statements, and each statement costs both processes
// a fixed amount of CPU that the job's writes do not: 1 slot drained
// faster than 2, 4 or 8.
const groupSlots = 1

// sqlStore implements Store for a dialect.
type sqlStore struct {
	d         dialect
	table     string // the quoted, qualified table name
	display   string
	opTimeout time.Duration
	gc        *groupCommit
	group     Group

	statements, commits, groupOps atomic.Int64

	qUpsert, qLock, qUnlock, qHeartbeat, qDeleteLocked, qDelete string
	qListFirst, qListAfter, qClaim, qRestore, qGet, qStatus     string
	qOutboxInsert, qOutboxAny, qOutboxLease                     string
}

const rowColumns = `job_id, job_class, job_item_json, queue, inserted_at, assume_dead_at, locked_by, locked_at, missing_at`

func newSQLStore(d dialect, table, display string, o Options) *sqlStore {
	s := &sqlStore{d: d, table: table, display: display, opTimeout: o.OpTimeout}
	s.gc = newGroupCommit(s.writeGroup, s.writeOne, s.IsConnError, o.BatchWindow, cmpOr(o.MaxBatch, 1000), groupSlots)
	s.gc.gather = gcGatherMax
	s.gc.release = o.Release
	s.group = Group{gc: s.gc, replaces: d.deletesUnlocked()}
	r := d.rebind
	t := table
	s.qUpsert = r(`INSERT INTO ` + t + ` (job_id, job_class, job_item_json, queue, inserted_at, assume_dead_at, missing_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (job_id) DO UPDATE SET assume_dead_at = excluded.assume_dead_at, job_item_json = excluded.job_item_json,
queue = excluded.queue, missing_at = excluded.missing_at, locked_by = NULL, locked_at = NULL
RETURNING inserted_at`)
	s.qLock = r(`UPDATE ` + t + ` SET locked_by = ?, locked_at = ?, assume_dead_at = ?, missing_at = NULL WHERE job_id = ?`)
	s.qUnlock = r(`UPDATE ` + t + ` SET locked_by = NULL, locked_at = NULL, assume_dead_at = ?, job_item_json = ?
WHERE job_id = ? AND locked_by = ? AND locked_at = ?`)
	s.qHeartbeat = r(`UPDATE ` + t + ` SET assume_dead_at = ? WHERE job_id = ?`)
	s.qDeleteLocked = r(`DELETE FROM ` + t + ` WHERE job_id = ? AND locked_by = ? AND locked_at = ?`)
	s.qDelete = r(`DELETE FROM ` + t + ` WHERE job_id = ?`)
	// Rows still to push (OutboxMark) are not the reconciler's: their job
	// is not in Redis yet, and a relay pushes it.
	notOutbox := ` AND COALESCE(locked_by, '') <> '` + OutboxMark + `'`
	s.qListFirst = r(`SELECT ` + rowColumns + ` FROM ` + t + ` WHERE assume_dead_at <= ?` + notOutbox + `
ORDER BY assume_dead_at, job_id LIMIT ?`)
	// The page after a row is a row-value comparison, which both engines
	// read as a range of the due index that stops at the limit. Spelled
	// `assume_dead_at > ? OR (assume_dead_at = ? AND job_id > ?)`, it made
	// PostgreSQL filter every due row before the cursor and SQLite sort
	// every due row after it, on every page: a pass grew with the square
	// of the rows due.
	s.qListAfter = r(`SELECT ` + rowColumns + ` FROM ` + t + ` WHERE assume_dead_at <= ?` + notOutbox + `
AND (assume_dead_at, job_id) > (?, ?)
ORDER BY assume_dead_at, job_id LIMIT ?`)
	s.qClaim = r(`DELETE FROM ` + t + ` WHERE job_id = ? AND assume_dead_at = ?`)
	s.qRestore = r(`INSERT INTO ` + t + ` (` + rowColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (job_id) DO NOTHING`)
	s.qGet = r(`SELECT ` + rowColumns + ` FROM ` + t + ` WHERE job_id = ?`)
	s.qStatus = r(`SELECT COUNT(*),
COALESCE(SUM(CASE WHEN locked_by IS NOT NULL AND missing_at IS NULL AND assume_dead_at > ?` + notOutbox + ` THEN 1 ELSE 0 END), 0),
COALESCE(SUM(CASE WHEN locked_by IS NULL AND missing_at IS NULL AND assume_dead_at > ? THEN 1 ELSE 0 END), 0),
COALESCE(SUM(CASE WHEN missing_at IS NOT NULL` + notOutbox + ` THEN 1 ELSE 0 END), 0),
COALESCE(SUM(CASE WHEN missing_at IS NULL AND assume_dead_at <= ?` + notOutbox + ` THEN 1 ELSE 0 END), 0),
COALESCE(SUM(CASE WHEN locked_by = '` + OutboxMark + `' THEN 1 ELSE 0 END), 0),
MIN(assume_dead_at)
FROM ` + t)
	s.outboxSQL(r, t)
	return s
}

func cmpOr(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func (s *sqlStore) Name() string { return s.display }
func (s *sqlStore) Kind() string { return s.d.kind() }

func (s *sqlStore) Close() error {
	s.gc.close()
	return s.d.close()
}

func (s *sqlStore) Stats() Stats {
	return Stats{Statements: s.statements.Load(), Commits: s.commits.Load(), GroupWrites: s.groupOps.Load()}
}

// counted records n statements in one transaction.
func (s *sqlStore) counted(n int) {
	s.statements.Add(int64(n))
	s.commits.Add(1)
}

// writeGroup applies a group with the dialect's statement, bounded by the
// store's operation timeout.
func (s *sqlStore) writeGroup(ctx context.Context, ops []*Op) error {
	s.groupOps.Add(int64(len(ops)))
	return s.op(ctx, func(ctx context.Context) error { return s.d.writeGroup(ctx, s, ops) })
}

// writeOne applies a single op with its own statement (after its group
// was refused).
func (s *sqlStore) writeOne(ctx context.Context, ops []*Op) error {
	op := ops[0]
	var err error
	switch op.kind {
	case opUpsert:
		op.ok, err = s.upsertNow(ctx, *op.up)
	case opLock:
		var n int64
		n, err = s.exec(ctx, s.qLock, op.lk.LockedBy, s.t(op.lk.LockedAt), s.t(op.lk.AssumeDeadAt), op.lk.JobID)
		op.ok = n > 0
	case opDelete:
		var n int64
		if op.anyLock {
			n, err = s.exec(ctx, s.qDelete, op.del.JobID)
		} else {
			n, err = s.exec(ctx, s.qDeleteLocked, op.del.JobID, op.del.LockedBy, s.t(op.del.LockedAt))
		}
		op.ok = n > 0
	}
	return err
}

func (s *sqlStore) IsConnError(err error) bool { return isTimeout(err) || s.d.isConnError(err) }

// isTimeout reports an operation cut by the store's own timeout, which
// means the database did not answer (a hung server counts as unreachable).
func isTimeout(err error) bool {
	var te *opTimeoutError
	return errors.As(err, &te)
}

// opTimeoutError wraps an error of an operation that ran out of its time.
type opTimeoutError struct{ err error }

func (e *opTimeoutError) Error() string { return e.err.Error() }
func (e *opTimeoutError) Unwrap() error { return e.err }

// op runs f with the per-operation timeout and marks a timeout that the
// caller's ctx did not cause.
func (s *sqlStore) op(ctx context.Context, f func(ctx context.Context) error) error {
	octx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	err := f(octx)
	if err != nil && ctx.Err() == nil && octx.Err() != nil {
		err = &opTimeoutError{err}
	}
	if err != nil && s.IsConnError(err) {
		s.d.connFailed()
	}
	return err
}

func (s *sqlStore) exec(ctx context.Context, q string, args ...any) (int64, error) {
	var n int64
	s.counted(1)
	err := s.op(ctx, func(ctx context.Context) error {
		var err error
		n, err = s.d.exec(ctx, q, args...)
		return err
	})
	return n, err
}

func (s *sqlStore) Migrate(ctx context.Context) (*MigrateOutcome, error) {
	var out *MigrateOutcome
	err := s.op(ctx, func(ctx context.Context) error {
		var err error
		out, err = s.d.migrate(ctx)
		return err
	})
	return out, err
}

func (s *sqlStore) DropTable(ctx context.Context) error {
	_, err := s.d.exec(ctx, `DROP TABLE IF EXISTS `+s.table)
	return err
}

func (s *sqlStore) t(t time.Time) any { return s.d.timeArg(Micro(t)) }

func (s *sqlStore) tp(t *time.Time) any {
	if t == nil {
		return nil
	}
	return s.t(*t)
}

// Upsert tells a new row from a refreshed one by its inserted_at: the
// conflict update keeps the existing row's.
func (s *sqlStore) Upsert(ctx context.Context, p UpsertParams) (bool, error) {
	return s.gc.do(ctx, &Op{kind: opUpsert, up: &p})
}

func (s *sqlStore) UpsertMany(ctx context.Context, ps []UpsertParams) ([]bool, []error) {
	ops := make([]*Op, len(ps))
	for i := range ps {
		ops[i] = &Op{kind: opUpsert, up: &ps[i]}
	}
	return s.gc.doMany(ctx, ops)
}

// upsertNow is Upsert in a statement of its own.
func (s *sqlStore) upsertNow(ctx context.Context, p UpsertParams) (bool, error) {
	var inserted dbTime
	s.counted(1)
	err := s.op(ctx, func(ctx context.Context) error {
		return s.d.each(ctx, s.qUpsert, []any{p.JobID, p.JobClass, p.ItemJSON, p.Queue, s.t(p.InsertedAt),
			s.t(p.AssumeDeadAt), s.tp(p.MissingAt)}, func(scan func(...any) error) error { return scan(&inserted) })
	})
	if err != nil {
		return false, err
	}
	return inserted.Time.Equal(Micro(p.InsertedAt)), nil
}

func (s *sqlStore) Group() *Group { return &s.group }

func (s *sqlStore) Unlock(ctx context.Context, p UnlockParams) (bool, error) {
	n, err := s.exec(ctx, s.qUnlock, s.t(p.AssumeDeadAt), p.ItemJSON, p.JobID, p.LockedBy, s.t(p.LockedAt))
	return n > 0, err
}

func (s *sqlStore) Heartbeat(ctx context.Context, p HeartbeatParams) (bool, error) {
	n, err := s.exec(ctx, s.qHeartbeat, s.t(p.AssumeDeadAt), p.JobID)
	return n > 0, err
}

func (s *sqlStore) DeleteLocked(ctx context.Context, p DeleteParams) (bool, error) {
	return s.gc.do(ctx, &Op{kind: opDelete, del: p})
}

func (s *sqlStore) DeleteJob(ctx context.Context, jobID string) (bool, error) {
	n, err := s.exec(ctx, s.qDelete, jobID)
	return n > 0, err
}

func (s *sqlStore) Claim(ctx context.Context, p ClaimParams) (bool, error) {
	n, err := s.exec(ctx, s.qClaim, p.JobID, s.t(p.Expect))
	return n > 0, err
}

func (s *sqlStore) Restore(ctx context.Context, r *Row) error {
	_, err := s.exec(ctx, s.qRestore, r.JobID, r.JobClass, r.ItemJSON, r.Queue, s.t(r.InsertedAt), s.t(r.AssumeDeadAt),
		strArg(r.LockedBy), s.tp(r.LockedAt), s.tp(r.MissingAt))
	return err
}

// rows runs a query of rows (rowColumns) and returns them.
func (s *sqlStore) rows(ctx context.Context, q string, args ...any) ([]*Row, error) {
	var out []*Row
	s.counted(1)
	err := s.op(ctx, func(ctx context.Context) error {
		out = out[:0]
		return s.d.each(ctx, q, args, func(scan func(...any) error) error {
			r, err := scanRow(scan)
			out = append(out, r)
			return err
		})
	})
	return out, err
}

func (s *sqlStore) ListDue(ctx context.Context, p ListDueParams) ([]*Row, error) {
	if p.After == nil {
		return s.rows(ctx, s.qListFirst, s.t(p.Now), p.Limit)
	}
	return s.rows(ctx, s.qListAfter, s.t(p.Now), s.t(p.After.AssumeDeadAt), p.After.JobID, p.Limit)
}

func (s *sqlStore) Get(ctx context.Context, jobID string) (*Row, error) {
	rows, err := s.rows(ctx, s.qGet, jobID)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	return rows[0], nil
}

func (s *sqlStore) Status(ctx context.Context, now time.Time) (*Counts, error) {
	c := &Counts{}
	err := s.op(ctx, func(ctx context.Context) error {
		n := s.t(now)
		var oldest dbTime
		err := s.d.each(ctx, s.qStatus, []any{n, n, n}, func(scan func(...any) error) error {
			return scan(&c.Total, &c.Locked, &c.Waiting, &c.Missing, &c.Overdue, &c.ToPush, &oldest)
		})
		if oldest.Valid {
			t := oldest.Time
			c.NextDue = &t
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

func strArg(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

func scanRow(scan func(...any) error) (*Row, error) {
	r := &Row{}
	var inserted, dead, lockedAt, missingAt dbTime
	var lockedBy sql.NullString
	if err := scan(&r.JobID, &r.JobClass, &r.ItemJSON, &r.Queue, &inserted, &dead, &lockedBy, &lockedAt, &missingAt); err != nil {
		return nil, err
	}
	r.InsertedAt, r.AssumeDeadAt = inserted.Time, dead.Time
	if lockedBy.Valid {
		r.LockedBy = &lockedBy.String
	}
	if lockedAt.Valid {
		t := lockedAt.Time
		r.LockedAt = &t
	}
	if missingAt.Valid {
		t := missingAt.Time
		r.MissingAt = &t
	}
	return r, nil
}

// dbTime scans a timestamptz (PostgreSQL) or the text SQLite stores.
type dbTime struct {
	Time  time.Time
	Valid bool
}

// Scan implements sql.Scanner.
func (d *dbTime) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		d.Valid = false
		return nil
	case time.Time:
		d.Time, d.Valid = x.UTC(), true
		return nil
	case string:
		return d.parse(x)
	case []byte:
		return d.parse(string(x))
	}
	return fmt.Errorf("durable: cannot read %T as a time", v)
}

func (d *dbTime) parse(s string) error {
	t, err := parseSQLiteTime(s)
	if err != nil {
		return err
	}
	d.Time, d.Valid = t, true
	return nil
}

// rebindDollar turns ? into $1, $2, … (no ? appears in our literals).
func rebindDollar(q string) string {
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// quoteIdent quotes an SQL identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

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

func parseSQLiteTime(s string) (time.Time, error) {
	for _, layout := range []string{sqliteTimeLayout, "2006-01-02 15:04:05.999999999-07:00", "2006-01-02 15:04:05.999999999", time.RFC3339Nano} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("durable: bad time %q in the table", s)
}

// sqliteTimeLayout is how SQLite rows keep times: UTC, fixed width, so
// that text order is time order and equal times are equal strings.
const sqliteTimeLayout = "2006-01-02 15:04:05.000000+00:00"
