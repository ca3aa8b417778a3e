package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// sqliteDialect is the embedded store for one host: the same table and
// semantics as PostgreSQL, in a SQLite file (pure Go, no cgo), through
// database/sql. Times are UTC text of fixed width (sqliteTimeLayout), so
// comparisons and ORDER BY work on them as on timestamptz.
type sqliteDialect struct {
	table  string // unquoted
	qtable string
	db     *sql.DB
	ckpt   *sqliteCheckpointer // background checkpoints; nil for :memory:
	stmtMu sync.Mutex
	stmts  map[sqliteStmtKey]*sql.Stmt // the group statements
}

func (*sqliteDialect) kind() string            { return "sqlite" }
func (*sqliteDialect) deletesUnlocked() bool   { return false }
func (*sqliteDialect) rebind(q string) string  { return q }
func (*sqliteDialect) timeArg(t time.Time) any { return formatSQLiteTime(t) }
func (*sqliteDialect) connFailed()             {}

func (d *sqliteDialect) exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := d.db.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (d *sqliteDialect) each(ctx context.Context, q string, args []any, row func(scan func(dest ...any) error) error) error {
	rows, err := d.db.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return scanRows(rows, row)
}

func (d *sqliteDialect) close() error {
	d.stmtMu.Lock()
	for _, st := range d.stmts {
		st.Close()
	}
	d.stmts = nil
	d.stmtMu.Unlock()
	if d.ckpt != nil {
		d.ckpt.close()
	}
	return d.db.Close()
}

const sqliteCreateTable = `CREATE TABLE IF NOT EXISTS %s ("job_id" text NOT NULL UNIQUE, "job_class" text NOT NULL, ` +
	`"job_item_json" text NOT NULL, "queue" text NOT NULL, ` +
	`"inserted_at" text DEFAULT (strftime('%%Y-%%m-%%d %%H:%%M:%%f000+00:00', 'now')) NOT NULL, ` +
	`"assume_dead_at" text NOT NULL, "locked_by" text, "locked_at" text, "missing_at" text)`

func (d *sqliteDialect) migrate(ctx context.Context) (*MigrateOutcome, error) {
	out := &MigrateOutcome{}
	var n int
	if err := d.db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, d.table).Scan(&n); err != nil {
		return nil, err
	}
	if n == 0 {
		if _, err := d.db.ExecContext(ctx, fmt.Sprintf(sqliteCreateTable, d.qtable)); err != nil {
			return nil, err
		}
		out.Created = true
	} else {
		if err := d.db.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info(?) WHERE name = 'missing_at'`, d.table).Scan(&n); err != nil {
			return nil, err
		}
		if n == 0 {
			if _, err := d.db.ExecContext(ctx, `ALTER TABLE `+d.qtable+` ADD COLUMN "missing_at" text`); err != nil {
				return nil, err
			}
			out.AddedMissingAt = true
		}
	}
	// The outbox's partial index (CREATE INDEX IF NOT EXISTS is a no-op
	// when it exists).
	if _, err := d.db.ExecContext(ctx, outboxIndexSQL(d.table, d.qtable)); err != nil {
		return nil, err
	}
	if err := d.db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = ?`, DueIndexName(d.table)).Scan(&n); err != nil || n > 0 {
		return out, err
	}
	_, err := d.db.ExecContext(ctx, `CREATE INDEX IF NOT EXISTS `+quoteIdent(DueIndexName(d.table))+` ON `+d.qtable+` (assume_dead_at, job_id)`)
	out.AddedIndex = err == nil
	return out, err
}

// isConnError treats a file that cannot be opened or read, or a database
// still locked by another process after the busy timeout, as unreachable.
func (*sqliteDialect) isConnError(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_BUSY, sqlite3.SQLITE_CORRUPT:
		return true
	}
	return false
}

// SQLitePath reads sqlite:PATH, sqlite://PATH (sqlite:///abs/path for an
// absolute path) and file:PATH URLs, keeping any ?query for the driver.
func SQLitePath(raw string) (path, query string, ok bool) {
	rest, found := "", false
	for _, p := range []string{"sqlite3://", "sqlite://", "sqlite3:", "sqlite:", "file://", "file:"} {
		if strings.HasPrefix(raw, p) {
			rest, found = raw[len(p):], true
			break
		}
	}
	if !found {
		return "", "", false
	}
	path, query, _ = strings.Cut(rest, "?")
	return path, query, path != ""
}

// openSQLite opens the file lazily. One connection serializes this
// process's statements; the busy timeout waits for other processes.
func openSQLite(raw string, o Options) (*sqlStore, error) {
	path, query, ok := SQLitePath(raw)
	if !ok {
		return nil, fmt.Errorf("durable: sqlite url %q: want sqlite:PATH", raw)
	}
	if path != ":memory:" {
		if abs, err := filepath.Abs(path); err == nil {
			path = abs
		}
	}
	// wal_autocheckpoint: SQLite's default copies the WAL back into the
	// file every 1,000 pages, inside the commit that crosses it, and every
	// job waiting for that group's lock waits for the copy. Checkpoints run
	// in the background instead (sqliteCheckpointer, every
	// sqliteCheckpointEvery groups); the writer's own, at 10,000 pages (a
	// WAL of about 40 MB), is the backstop. Durability is the same: a
	// commit is in the WAL, synced (synchronous=FULL), either way.
	//
	// busy_timeout: how long a statement waits for another process's lock,
	// 5 s but never longer than OpTimeout, since the group writes wait
	// under no context deadline (sqliteDialect.writeGroup).
	//
	// A URL's own ?_pragma=… comes after these and wins; its busy_timeout
	// replaces this one (the driver runs every busy_timeout first, in no
	// set order).
	busy := min(5*time.Second, o.OpTimeout)
	if busy <= 0 {
		busy = 5 * time.Second
	}
	params := []string{"_pragma=journal_mode(WAL)", "_pragma=wal_autocheckpoint(10000)", "_txlock=immediate"}
	if !strings.Contains(strings.ToLower(query), "busy_timeout") {
		params = append([]string{fmt.Sprintf("_pragma=busy_timeout(%d)", busy.Milliseconds())}, params...)
	}
	if query != "" {
		params = append(params, query)
	}
	dsn := "file:" + path + "?" + strings.Join(params, "&")
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("durable: database %s: %w", raw, err)
	}
	db.SetMaxOpenConns(1)
	d := &sqliteDialect{table: o.Table, qtable: quoteIdent(o.Table), db: db}
	if path != ":memory:" {
		d.ckpt = newSQLiteCheckpointer(dsn)
	}
	return newSQLStore(d, d.qtable, "sqlite:"+path, o), nil
}

func formatSQLiteTime(t time.Time) string { return Micro(t).Format(sqliteTimeLayout) }

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
// (openSQLite sets it no longer than Options.OpTimeout) and which ends in
// SQLITE_BUSY, a connection error; after it, in WAL mode, nothing waits for
// another connection. A cancellable context costs a watcher goroutine per
// statement in database/sql and in the driver (the transaction's, each
// statement's interrupt, the rows'), four or five per group.
func (d *sqliteDialect) writeGroup(ctx context.Context, s *sqlStore, ops []*Op) error {
	ctx = context.WithoutCancel(ctx)
	g := splitGroupInOrder(ops)
	type part struct {
		kind opKind
		ops  []*Op
		size int // the statement's rows: len(ops) or more (padding)
	}
	var parts []part
	for rest := g.ups; len(rest) > 0; {
		n := sqliteSizeBelow(len(rest))
		parts = append(parts, part{opUpsert, rest[:n], n})
		rest = rest[n:]
	}
	for _, k := range []struct {
		kind opKind
		ops  []*Op
	}{{opLock, g.lcks}, {opDelete, g.dels}} {
		for chunk := range slices.Chunk(k.ops, sqliteChunk) {
			parts = append(parts, part{k.kind, chunk, sqliteSizeAbove(len(chunk))})
		}
	}
	// Prepare before the transaction takes the connection.
	stmts := make([]*sql.Stmt, len(parts))
	for i, p := range parts {
		st, err := d.stmt(ctx, s.table, p.kind, p.size)
		if err != nil {
			return err
		}
		stmts[i] = st
	}
	tx, err := d.db.BeginTx(ctx, nil)
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
			if p.kind == opUpsert {
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
	if d.ckpt != nil {
		d.ckpt.committed()
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
func sqliteArgs(s *sqlStore, kind opKind, ops []*Op, size int) []any {
	var cols int
	switch kind {
	case opUpsert:
		cols = 7
	case opLock:
		cols = 4
	default:
		cols = 3
	}
	args := make([]any, 0, cols*size)
	for _, op := range ops {
		switch kind {
		case opUpsert:
			p := op.up
			args = append(args, p.JobID, p.JobClass, p.ItemJSON, p.Queue, s.t(p.InsertedAt), s.t(p.AssumeDeadAt), s.tp(p.MissingAt))
		case opLock:
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
func sqliteGroupSQL(table string, kind opKind, rows int) string {
	switch kind {
	case opUpsert:
		return `INSERT INTO ` + table + ` (job_id, job_class, job_item_json, queue, inserted_at, assume_dead_at, missing_at) VALUES ` +
			placeholders(rows, 7) + `
ON CONFLICT (job_id) DO UPDATE SET assume_dead_at = excluded.assume_dead_at, job_item_json = excluded.job_item_json,
queue = excluded.queue, missing_at = excluded.missing_at, locked_by = NULL, locked_at = NULL
RETURNING job_id, inserted_at`
	case opLock:
		return `UPDATE OR FAIL ` + table + ` SET locked_by = x.column2, locked_at = x.column3, assume_dead_at = x.column4, missing_at = NULL
FROM (VALUES ` + placeholders(rows, 4) + `) AS x WHERE ` + table + `.job_id = x.column1 RETURNING ` + table + `.job_id`
	}
	return `DELETE FROM ` + table + ` WHERE (job_id, locked_by, locked_at) IN (VALUES ` + placeholders(rows, 3) + `) RETURNING job_id`
}

// stmt returns the prepared group statement of kind for rows rows.
func (d *sqliteDialect) stmt(ctx context.Context, table string, kind opKind, rows int) (*sql.Stmt, error) {
	key := sqliteStmtKey{kind, rows}
	d.stmtMu.Lock()
	defer d.stmtMu.Unlock()
	if st := d.stmts[key]; st != nil {
		return st, nil
	}
	st, err := d.db.PrepareContext(ctx, sqliteGroupSQL(table, kind, rows))
	if err != nil {
		return nil, err
	}
	if d.stmts == nil {
		d.stmts = map[sqliteStmtKey]*sql.Stmt{}
	}
	d.stmts[key] = st
	return st, nil
}

type sqliteStmtKey struct {
	kind opKind
	rows int
}

// sqliteCheckpointer copies the WAL back into the database file from a
// connection of its own, so that the writer's commits rarely do it
// themselves: SQLite runs an automatic checkpoint inside the commit that
// crosses wal_autocheckpoint, and every job waiting for that group's lock
// waits for the copy too. A PASSIVE checkpoint does not block the writer.
// The writer's own automatic checkpoint (wal_autocheckpoint, openSQLite)
// stays as the backstop if this one falls behind.
type sqliteCheckpointer struct {
	dsn     string
	db      *sql.DB // opened with the first group commit
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	started bool
	commits int // since the last kick; the writer's only
}

// sqliteCheckpointEvery is how many group commits pass between two
// background checkpoints. A drain's group writes about 22 pages to the WAL
// (BenchmarkSQLiteDrainGroups), many of them the same pages group after
// group (the unique index's, the rows near the front of the queue), and a
// checkpoint copies each page once however often it was written since the
// last one: with 256 groups (a WAL of about 23 MB, under the writer's own
// 10,000-page backstop) instead of 64, a drain of 36,000 jobs copied
// 11,860 pages into the database file instead of 20,214. The CPU per job
// it saves was within the noise (BenchmarkSQLiteDrainGroups, two sets:
// 47.3 against 46.9 and 42.9 against 47.9 µs).
const sqliteCheckpointEvery = 256

func newSQLiteCheckpointer(dsn string) *sqliteCheckpointer {
	return &sqliteCheckpointer{dsn: dsn, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// committed counts a group commit and wakes the checkpointer every
// sqliteCheckpointEvery of them. Called by the writer only.
func (c *sqliteCheckpointer) committed() {
	c.once.Do(func() {
		db, err := sql.Open("sqlite", c.dsn)
		if err != nil {
			return // the writer's automatic checkpoints do the work
		}
		db.SetMaxOpenConns(1)
		c.db, c.started = db, true
		go c.run()
	})
	if c.commits++; c.commits < sqliteCheckpointEvery {
		return
	}
	c.commits = 0
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *sqliteCheckpointer) run() {
	defer close(c.done)
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
			// Best effort: a busy or failing checkpoint leaves the work to
			// the next one or to the writer's automatic checkpoint.
			c.db.Exec(`PRAGMA wal_checkpoint(PASSIVE)`)
		}
	}
}

// close stops the checkpointer; the writer has stopped (groupCommit.close
// returned).
func (c *sqliteCheckpointer) close() {
	c.once.Do(func() {}) // never started after this
	close(c.stop)
	if c.started {
		<-c.done
		c.db.Close()
	}
}
