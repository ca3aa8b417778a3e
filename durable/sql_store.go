package durable

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gojob/gojob/sidekiq"
)

// dialect is what differs between PostgreSQL and SQLite.
type dialect interface {
	kind() string
	// rebind turns the ? placeholders into the dialect's.
	rebind(q string) string
	// timeArg is how a time is passed as a parameter.
	timeArg(t time.Time) any
	// migrate creates or upgrades the table.
	migrate(ctx context.Context, db *sql.DB, table string) (*migrateOutcome, error)
	isConnError(err error) bool
	// writeGroup applies a group of hot writes (see group_commit.go) in one
	// go and sets each op's answer; an error means none was applied.
	writeGroup(ctx context.Context, s *sqlStore, ops []*gcOp) error
	// groupSlots is how many groups may be written at once.
	groupSlots() int
}

// sqlStore implements store over database/sql for a dialect.
type sqlStore struct {
	db        *sql.DB
	d         dialect
	table     string // the quoted, qualified table name
	display   string
	opTimeout time.Duration
	gc        *groupCommit
	pgGroup   *pgGroupConns // PostgreSQL: the group writes' connections

	ckpt   *sqliteCheckpointer // SQLite: background checkpoints
	stmtMu sync.Mutex
	stmts  map[sqliteStmtKey]*sql.Stmt // SQLite: the group statements
	stats  storeStats

	qUpsert, qLock, qUnlock, qHeartbeat, qDeleteLocked, qDelete string
	qListFirst, qListAfter, qTouch, qClaim, qRestore, qGet      string
	qStatus                                                     string
	qGroup                                                      string
}

const rowColumns = `job_id, job_class, job_item_json, queue, inserted_at, assume_dead_at, locked_by, locked_at, missing_at`

// newSQLStore returns a store whose group commit has no window and groups
// of up to 1000 writes; withGroupCommit applies a Config's.
func newSQLStore(db *sql.DB, d dialect, table, display string, opTimeout time.Duration) *sqlStore {
	s := &sqlStore{db: db, d: d, table: table, display: display, opTimeout: opTimeout}
	s.gc = newGroupCommit(s.writeGroup, s.writeOne, s.isConnError, 0, 1000, d.groupSlots())
	s.gc.gather = gcGatherMax
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
	s.qListFirst = r(`SELECT ` + rowColumns + ` FROM ` + t + ` WHERE assume_dead_at <= ?
ORDER BY assume_dead_at, job_id LIMIT ?`)
	s.qListAfter = r(`SELECT ` + rowColumns + ` FROM ` + t + ` WHERE assume_dead_at <= ?
AND (assume_dead_at > ? OR (assume_dead_at = ? AND job_id > ?))
ORDER BY assume_dead_at, job_id LIMIT ?`)
	s.qTouch = r(`UPDATE ` + t + ` SET assume_dead_at = ?, missing_at = ? WHERE job_id = ? AND assume_dead_at = ?`)
	s.qClaim = r(`DELETE FROM ` + t + ` WHERE job_id = ? AND assume_dead_at = ?`)
	s.qRestore = r(`INSERT INTO ` + t + ` (` + rowColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (job_id) DO NOTHING`)
	s.qGet = r(`SELECT ` + rowColumns + ` FROM ` + t + ` WHERE job_id = ?`)
	s.qGroup = fmt.Sprintf(pgGroupSQL, t)
	s.qStatus = r(`SELECT COUNT(*),
COALESCE(SUM(CASE WHEN locked_by IS NOT NULL AND missing_at IS NULL AND assume_dead_at > ? THEN 1 ELSE 0 END), 0),
COALESCE(SUM(CASE WHEN locked_by IS NULL AND missing_at IS NULL AND assume_dead_at > ? THEN 1 ELSE 0 END), 0),
COALESCE(SUM(CASE WHEN missing_at IS NOT NULL THEN 1 ELSE 0 END), 0),
COALESCE(SUM(CASE WHEN missing_at IS NULL AND assume_dead_at <= ? THEN 1 ELSE 0 END), 0),
MIN(assume_dead_at)
FROM ` + t)
	return s
}

// withGroupCommit sets the group commit's window and group size from o.
func (s *sqlStore) withGroupCommit(o *Config) *sqlStore {
	s.gc = newGroupCommit(s.writeGroup, s.writeOne, s.isConnError, o.BatchWindow, o.MaxBatch, s.d.groupSlots())
	s.gc.gather = gcGatherMax
	return s
}

func (s *sqlStore) name() string { return s.display }
func (s *sqlStore) kind() string { return s.d.kind() }
func (s *sqlStore) close() error {
	s.gc.close()
	if s.pgGroup != nil {
		s.pgGroup.close()
	}
	s.stmtMu.Lock()
	for _, st := range s.stmts {
		st.Close()
	}
	s.stmts = nil
	s.stmtMu.Unlock()
	if s.ckpt != nil {
		s.ckpt.close()
	}
	return s.db.Close()
}

// storeStats counts what a store sent to its database.
type storeStats struct {
	// statements counts SQL statements (BEGIN and COMMIT excluded).
	statements atomic.Int64
	// commits counts transactions: one per statement outside a
	// transaction, one per explicit transaction.
	commits atomic.Int64
	// groupOps counts the writes that went through the group commit.
	groupOps atomic.Int64
}

// counted records n statements in one transaction.
func (s *sqlStore) counted(n int) {
	s.stats.statements.Add(int64(n))
	s.stats.commits.Add(1)
}

// writeGroup applies a group with the dialect's statement, bounded by the
// store's operation timeout.
func (s *sqlStore) writeGroup(ctx context.Context, ops []*gcOp) error {
	s.stats.groupOps.Add(int64(len(ops)))
	return s.op(ctx, func(ctx context.Context) error { return s.d.writeGroup(ctx, s, ops) })
}

// writeOne applies a single op with its own statement (after its group
// was refused).
func (s *sqlStore) writeOne(ctx context.Context, ops []*gcOp) error {
	op := ops[0]
	var err error
	switch op.kind {
	case gcUpsert:
		op.ok, err = s.upsertNow(ctx, *op.up)
	case gcLock:
		var n int64
		n, err = s.exec(ctx, s.qLock, op.lk.LockedBy, s.t(op.lk.LockedAt), s.t(op.lk.AssumeDeadAt), op.lk.JobID)
		op.ok = n > 0
	case gcDelete:
		var n int64
		n, err = s.exec(ctx, s.qDeleteLocked, op.del.JobID, op.del.LockedBy, s.t(op.del.LockedAt))
		op.ok = n > 0
	}
	return err
}
func (s *sqlStore) isConnError(err error) bool { return isTimeout(err) || s.d.isConnError(err) }

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
	if err != nil && s.pgGroup != nil && s.isConnError(err) {
		s.pgGroup.suspect()
	}
	return err
}

func (s *sqlStore) exec(ctx context.Context, q string, args ...any) (int64, error) {
	var n int64
	s.counted(1)
	err := s.op(ctx, func(ctx context.Context) error {
		res, err := s.db.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

func (s *sqlStore) migrate(ctx context.Context) (*migrateOutcome, error) {
	var out *migrateOutcome
	err := s.op(ctx, func(ctx context.Context) error {
		var err error
		out, err = s.d.migrate(ctx, s.db, s.table)
		return err
	})
	return out, err
}

func (s *sqlStore) t(t time.Time) any { return s.d.timeArg(micro(t)) }

func (s *sqlStore) tp(t *time.Time) any {
	if t == nil {
		return nil
	}
	return s.t(*t)
}

func (s *sqlStore) upsert(ctx context.Context, p upsertParams) error {
	_, err := s.upsertCreated(ctx, p)
	return err
}

// upsertCreated tells a new row from a refreshed one by its inserted_at:
// the conflict update keeps the existing row's. It goes through the group
// commit.
func (s *sqlStore) upsertCreated(ctx context.Context, p upsertParams) (bool, error) {
	return s.gc.do(ctx, &gcOp{kind: gcUpsert, up: &p})
}

func (s *sqlStore) upsertMany(ctx context.Context, ps []upsertParams) ([]bool, []error) {
	ops := make([]*gcOp, len(ps))
	for i := range ps {
		ops[i] = &gcOp{kind: gcUpsert, up: &ps[i]}
	}
	return s.gc.doMany(ctx, ops)
}

// upsertNow is upsertCreated in a statement of its own.
func (s *sqlStore) upsertNow(ctx context.Context, p upsertParams) (bool, error) {
	var inserted dbTime
	s.counted(1)
	err := s.op(ctx, func(ctx context.Context) error {
		return s.db.QueryRowContext(ctx, s.qUpsert, p.JobID, p.JobClass, p.ItemJSON, p.Queue, s.t(p.InsertedAt),
			s.t(p.AssumeDeadAt), s.tp(p.MissingAt)).Scan(&inserted)
	})
	if err != nil {
		return false, err
	}
	return inserted.Time.Equal(micro(p.InsertedAt)), nil
}

func (s *sqlStore) lock(ctx context.Context, p lockParams) (bool, error) {
	return s.lockOp(ctx, &gcOp{kind: gcLock, lk: p})
}

func (s *sqlStore) lockOp(ctx context.Context, op *gcOp) (bool, error) {
	return s.gc.do(ctx, op)
}

func (s *sqlStore) lockStart(op *gcOp) error { return s.gc.enqueue(op) }

func (s *sqlStore) lockWait(ctx context.Context, op *gcOp) (bool, error) {
	if !s.gc.wait(ctx, op) {
		return false, ctx.Err()
	}
	return op.ok, op.err
}

func (s *sqlStore) unlock(ctx context.Context, p unlockParams) (bool, error) {
	n, err := s.exec(ctx, s.qUnlock, s.t(p.AssumeDeadAt), p.ItemJSON, p.JobID, p.LockedBy, s.t(p.LockedAt))
	return n > 0, err
}

func (s *sqlStore) heartbeat(ctx context.Context, p heartbeatParams) (bool, error) {
	n, err := s.exec(ctx, s.qHeartbeat, s.t(p.AssumeDeadAt), p.JobID)
	return n > 0, err
}

func (s *sqlStore) deleteLocked(ctx context.Context, p deleteLockedParams) (bool, error) {
	return s.gc.do(ctx, &gcOp{kind: gcDelete, del: p})
}

func (s *sqlStore) deleteLockedAsync(op *gcOp, ack sidekiq.DeferredAck, then gcThen) {
	s.gc.doAsync(op, ack, then)
}

func (s *sqlStore) deleteJob(ctx context.Context, jobID string) (bool, error) {
	n, err := s.exec(ctx, s.qDelete, jobID)
	return n > 0, err
}

func (s *sqlStore) touch(ctx context.Context, p touchParams) (bool, error) {
	n, err := s.exec(ctx, s.qTouch, s.t(p.AssumeDeadAt), s.tp(p.MissingAt), p.JobID, s.t(p.Expect))
	return n > 0, err
}

func (s *sqlStore) claim(ctx context.Context, p claimParams) (bool, error) {
	n, err := s.exec(ctx, s.qClaim, p.JobID, s.t(p.Expect))
	return n > 0, err
}

func (s *sqlStore) restore(ctx context.Context, r *row) error {
	_, err := s.exec(ctx, s.qRestore, r.JobID, r.JobClass, r.ItemJSON, r.Queue, s.t(r.InsertedAt), s.t(r.AssumeDeadAt),
		strArg(r.LockedBy), s.tp(r.LockedAt), s.tp(r.MissingAt))
	return err
}

func (s *sqlStore) listDue(ctx context.Context, p listDueParams) ([]*row, error) {
	var out []*row
	s.counted(1)
	err := s.op(ctx, func(ctx context.Context) error {
		var rows *sql.Rows
		var err error
		if p.After == nil {
			rows, err = s.db.QueryContext(ctx, s.qListFirst, s.t(p.Now), p.Limit)
		} else {
			a := s.t(p.After.AssumeDeadAt)
			rows, err = s.db.QueryContext(ctx, s.qListAfter, s.t(p.Now), a, a, p.After.JobID, p.Limit)
		}
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			r, err := scanRow(rows)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	return out, err
}

func (s *sqlStore) get(ctx context.Context, jobID string) (*row, error) {
	var out *row
	s.counted(1)
	err := s.op(ctx, func(ctx context.Context) error {
		r, err := scanRow(s.db.QueryRowContext(ctx, s.qGet, jobID))
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		out = r
		return err
	})
	return out, err
}

func (s *sqlStore) status(ctx context.Context, now time.Time) (*DatabaseStatus, error) {
	st := &DatabaseStatus{Database: s.display, Kind: s.kind()}
	err := s.op(ctx, func(ctx context.Context) error {
		n := s.t(now)
		var oldest dbTime
		err := s.db.QueryRowContext(ctx, s.qStatus, n, n, n).Scan(&st.Total, &st.Locked, &st.Waiting, &st.Missing, &st.Overdue, &oldest)
		if err != nil {
			return err
		}
		if oldest.Valid {
			t := oldest.Time
			st.NextDue = &t
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

func strArg(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

type scanner interface{ Scan(dest ...any) error }

func scanRow(sc scanner) (*row, error) {
	r := &row{}
	var inserted, dead, lockedAt, missingAt dbTime
	var lockedBy sql.NullString
	if err := sc.Scan(&r.JobID, &r.JobClass, &r.ItemJSON, &r.Queue, &inserted, &dead, &lockedBy, &lockedAt, &missingAt); err != nil {
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

// sqliteTimeLayout is how SQLite rows keep times: UTC, fixed width, so
// that text order is time order and equal times are equal strings.
const sqliteTimeLayout = "2006-01-02 15:04:05.000000+00:00"

func formatSQLiteTime(t time.Time) string { return micro(t).Format(sqliteTimeLayout) }

func parseSQLiteTime(s string) (time.Time, error) {
	for _, layout := range []string{sqliteTimeLayout, "2006-01-02 15:04:05.999999999-07:00", "2006-01-02 15:04:05.999999999", time.RFC3339Nano} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("durable: bad time %q in the table", s)
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
