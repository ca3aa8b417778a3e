package durable

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// sqliteDialect is the embedded store for one host: the same table and
// semantics as PostgreSQL, in a SQLite file (pure Go, no cgo). Times are
// UTC text of fixed width (sqliteTimeLayout), so comparisons and ORDER BY
// work on them as on timestamptz.
type sqliteDialect struct{ table string }

func (sqliteDialect) kind() string            { return "sqlite" }
func (sqliteDialect) rebind(q string) string  { return q }
func (sqliteDialect) timeArg(t time.Time) any { return formatSQLiteTime(t) }

const sqliteCreateTable = `CREATE TABLE IF NOT EXISTS %s ("job_id" text NOT NULL UNIQUE, "job_class" text NOT NULL, ` +
	`"job_item_json" text NOT NULL, "queue" text NOT NULL, ` +
	`"inserted_at" text DEFAULT (strftime('%%Y-%%m-%%d %%H:%%M:%%f000+00:00', 'now')) NOT NULL, ` +
	`"assume_dead_at" text NOT NULL, "locked_by" text, "locked_at" text, "missing_at" text)`

func (d sqliteDialect) migrate(ctx context.Context, db *sql.DB, table string) (*migrateOutcome, error) {
	out := &migrateOutcome{}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, d.table).Scan(&n); err != nil {
		return nil, err
	}
	if n == 0 {
		if _, err := db.ExecContext(ctx, fmt.Sprintf(sqliteCreateTable, table)); err != nil {
			return nil, err
		}
		out.Created = true
		var err error
		out.AddedIndex, err = d.ensureIndex(ctx, db, table)
		return out, err
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info(?) WHERE name = 'missing_at'`, d.table).Scan(&n); err != nil {
		return nil, err
	}
	if n == 0 {
		if _, err := db.ExecContext(ctx, `ALTER TABLE `+table+` ADD COLUMN "missing_at" text`); err != nil {
			return nil, err
		}
		out.AddedMissingAt = true
	}
	var err error
	out.AddedIndex, err = d.ensureIndex(ctx, db, table)
	return out, err
}

func (d sqliteDialect) ensureIndex(ctx context.Context, db *sql.DB, table string) (bool, error) {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = ?`, dueIndexName(d.table)).Scan(&n); err != nil || n > 0 {
		return false, err
	}
	_, err := db.ExecContext(ctx, `CREATE INDEX IF NOT EXISTS `+quoteIdent(dueIndexName(d.table))+` ON `+table+` (assume_dead_at, job_id)`)
	return err == nil, err
}

// isConnError treats a file that cannot be opened or read, or a database
// still locked by another process after the busy timeout, as unreachable.
func (sqliteDialect) isConnError(err error) bool {
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

// sqlitePath reads sqlite:PATH, sqlite://PATH (sqlite:///abs/path for an
// absolute path) and file:PATH URLs, keeping any ?query for the driver.
func sqlitePath(raw string) (path, query string, ok bool) {
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
func openSQLite(raw, table string, o *Config) (*sqlStore, error) {
	path, query, ok := sqlitePath(raw)
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
	// A URL's own ?_pragma=… comes after these and wins.
	busy := min(5*time.Second, o.OpTimeout)
	if busy <= 0 {
		busy = 5 * time.Second
	}
	params := []string{fmt.Sprintf("_pragma=busy_timeout(%d)", busy.Milliseconds()), "_pragma=journal_mode(WAL)", "_pragma=wal_autocheckpoint(10000)", "_txlock=immediate"}
	if query != "" {
		params = append(params, query)
	}
	dsn := "file:" + path + "?" + strings.Join(params, "&")
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("durable: database %s: %w", raw, err)
	}
	db.SetMaxOpenConns(1)
	s := newSQLStore(db, sqliteDialect{table: table}, quoteIdent(table), "sqlite:"+path, o.OpTimeout).withGroupCommit(o)
	if path != ":memory:" {
		s.ckpt = newSQLiteCheckpointer(dsn)
	}
	return s, nil
}
