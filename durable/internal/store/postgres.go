package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gojob/gojob/internal/redact"
)

// pgDialect is PostgreSQL through pgx, with Amigo::DurableJob's exact
// table so Ruby processes can share it.
//
// It has two pgx pools. The group statement (one per group of hot
// writes) goes through a pool of its own, of groupSlots connections, that
// run with plan_cache_mode = force_generic_plan: the statement is
// prepared once per connection, but with array parameters PostgreSQL's
// plan cache otherwise keeps choosing a custom plan and plans the whole
// three-part statement again on every execution (measured: about 0.25 ms
// of server CPU per group, as much as applying a dozen writes). The
// generic plan is the one every group wants: a nested loop over the
// unnested arrays with the job_id index. It is made once, at the
// connection's first group, often when the table is still empty (a
// bench, a fresh deployment): planned then, a scan of the whole table can
// look cheaper than the index, and that plan would stay. Sequential scans
// and hash and merge joins are therefore off on these connections; the
// statement has an index for every row it touches. Everything else goes
// through the other pool, with the server's settings.
//
// After a connection error the other idle connections are likely dead
// too (a restart, a cut network): each is pinged before its next use
// (shouldPing), as pgxpool does on its own only for a connection idle for
// more than a second.
type pgDialect struct {
	schema, table string // unquoted
	qtable        string // quoted and qualified
	pool, group   *pgxpool.Pool
	qGroup        string
	// epoch counts the connection errors seen; a connection records the
	// epoch it was last known good in.
	epoch atomic.Int64
}

// pgGroupParams are the group connections' settings (see pgDialect); a
// setting the URL gives wins.
var pgGroupParams = map[string]string{
	"plan_cache_mode":  "force_generic_plan",
	"enable_seqscan":   "off",
	"enable_hashjoin":  "off",
	"enable_mergejoin": "off",
}

// openPostgres opens lazy pools (nothing is dialed until the first
// statement, like Sequel's test: false).
func openPostgres(rawURL string, o Options) (*sqlStore, error) {
	pc, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("durable: database %s: %w", redactURL(rawURL), err)
	}
	if pc.ConnConfig.ConnectTimeout == 0 {
		pc.ConnConfig.ConnectTimeout = o.ConnectTimeout
	}
	d := &pgDialect{schema: o.Schema, table: o.Table, qtable: quoteIdent(o.Schema) + "." + quoteIdent(o.Table)}
	d.qGroup = fmt.Sprintf(pgGroupSQL, d.qtable)
	pc.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool { return d.shouldPing(p.Conn, p.IdleDuration) }
	pc.MaxConnIdleTime = 5 * time.Minute
	gc := pc.Copy()
	// The group commit's connections count in MaxConns.
	pc.MaxConns = int32(max(cmpOr(o.MaxConns, 10)-groupSlots, 1))
	gc.MaxConns = groupSlots
	gc.ConnConfig.RuntimeParams = map[string]string{}
	for k, v := range pc.ConnConfig.RuntimeParams {
		gc.ConnConfig.RuntimeParams[k] = v
	}
	for k, v := range pgGroupParams {
		if _, set := gc.ConnConfig.RuntimeParams[k]; !set {
			gc.ConnConfig.RuntimeParams[k] = v
		}
	}
	if d.pool, err = pgxpool.NewWithConfig(context.Background(), pc); err != nil {
		return nil, fmt.Errorf("durable: database %s: %w", redactURL(rawURL), err)
	}
	if d.group, err = pgxpool.NewWithConfig(context.Background(), gc); err != nil {
		d.pool.Close()
		return nil, fmt.Errorf("durable: database %s: %w", redactURL(rawURL), err)
	}
	return newSQLStore(d, d.qtable, redactURL(rawURL), o), nil
}

func (*pgDialect) kind() string            { return "postgres" }
func (*pgDialect) deletesUnlocked() bool   { return true }
func (*pgDialect) rebind(q string) string  { return rebindDollar(q) }
func (*pgDialect) timeArg(t time.Time) any { return t }

func (d *pgDialect) close() error {
	d.pool.Close()
	d.group.Close()
	return nil
}

// retry runs f once more when its first attempt failed before anything
// was sent (pgconn.SafeToRetry: an idle connection the server closed), as
// database/sql does with driver.ErrBadConn.
func retry(ctx context.Context, f func() error) error {
	err := f()
	if err != nil && pgconn.SafeToRetry(err) && ctx.Err() == nil {
		err = f()
	}
	return err
}

func (d *pgDialect) exec(ctx context.Context, q string, args ...any) (int64, error) {
	var n int64
	err := retry(ctx, func() error {
		tag, err := d.pool.Exec(ctx, q, args...)
		n = tag.RowsAffected()
		return err
	})
	return n, err
}

func (d *pgDialect) each(ctx context.Context, q string, args []any, row func(scan func(dest ...any) error) error) error {
	return retry(ctx, func() error { return pgEach(ctx, d.pool, q, args, row) })
}

// pgQuerier is a pool or a transaction.
type pgQuerier interface {
	Query(ctx context.Context, q string, args ...any) (pgx.Rows, error)
}

func pgEach(ctx context.Context, db pgQuerier, q string, args []any, row func(scan func(dest ...any) error) error) error {
	rows, err := db.Query(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return scanRows(rows, row)
}

// pgScalar reads a query's one value.
func pgScalar(ctx context.Context, db pgQuerier, dst any, q string, args ...any) error {
	return pgEach(ctx, db, q, args, func(scan func(...any) error) error { return scan(dst) })
}

// pgCreateTable is the DDL Sequel generates for Amigo's create_table (same
// columns, types, constraints and default, in Sequel's clause order). The
// UNIQUE constraint is named <table>_job_id_key by PostgreSQL, as in Ruby.
// Amigo leaves assume_dead_at without an index ("write-heavy table");
// Migrate adds one (DueIndexName).
const pgCreateTable = `CREATE TABLE IF NOT EXISTS %s ("job_id" text NOT NULL UNIQUE, "job_class" text NOT NULL, ` +
	`"job_item_json" text NOT NULL, "queue" text NOT NULL, "inserted_at" timestamptz DEFAULT now() NOT NULL, ` +
	`"assume_dead_at" timestamptz NOT NULL, "locked_by" text, "locked_at" timestamptz, "missing_at" timestamptz)`

func (d *pgDialect) migrate(ctx context.Context) (*MigrateOutcome, error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// Two processes creating the table at once can collide in the catalog;
	// serialize migrations of this table.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "gojob durable migrate "+d.qtable); err != nil {
		return nil, err
	}
	out := &MigrateOutcome{}
	var exists, hasMissing bool
	if err := pgScalar(ctx, tx, &exists, `SELECT EXISTS (SELECT 1 FROM information_schema.tables WHERE table_schema = $1 AND table_name = $2)`,
		d.schema, d.table); err != nil {
		return nil, err
	}
	if !exists {
		if d.schema != "public" {
			if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+quoteIdent(d.schema)); err != nil {
				return nil, err
			}
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(pgCreateTable, d.qtable)); err != nil {
			return nil, err
		}
		out.Created = true
	} else {
		if err := pgScalar(ctx, tx, &hasMissing, `SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 AND column_name = 'missing_at')`,
			d.schema, d.table); err != nil {
			return nil, err
		}
		if !hasMissing {
			if _, err := tx.Exec(ctx, `ALTER TABLE `+d.qtable+` ADD COLUMN IF NOT EXISTS "missing_at" timestamptz`); err != nil {
				return nil, err
			}
			out.AddedMissingAt = true
		}
	}
	// The reconciler's index on (assume_dead_at, job_id), which Amigo's
	// table does not have: see DueIndexName.
	var hasIndex bool
	if err := pgScalar(ctx, tx, &hasIndex, `SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = $1 AND tablename = $2 AND indexname = $3)`,
		d.schema, d.table, DueIndexName(d.table)); err != nil {
		return nil, err
	}
	if !hasIndex {
		if _, err := tx.Exec(ctx, `CREATE INDEX IF NOT EXISTS `+quoteIdent(DueIndexName(d.table))+` ON `+d.qtable+` (assume_dead_at, job_id)`); err != nil {
			return nil, err
		}
		out.AddedIndex = true
	}
	if err := pgScalar(ctx, tx, &hasIndex, `SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = $1 AND tablename = $2 AND indexname = $3)`,
		d.schema, d.table, outboxIndexName(d.table)); err != nil {
		return nil, err
	}
	if !hasIndex {
		if _, err := tx.Exec(ctx, outboxIndexSQL(d.table, d.qtable)); err != nil {
			return nil, err
		}
	}
	return out, tx.Commit(ctx)
}

// isConnError is Sequel::DatabaseConnectionError's scope: the database
// could not be reached or dropped the connection, as opposed to an error
// in a statement.
func (*pgDialect) isConnError(err error) bool {
	if err == nil {
		return false
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03" || pe.Code == "53300"
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	return pgconn.SafeToRetry(err) || pgconn.Timeout(err)
}

// connFailed records a connection error: every connection is pinged
// before its next use.
func (d *pgDialect) connFailed() { d.epoch.Add(1) }

const pgEpochKey = "gojob durable epoch"

// shouldPing reports whether c, idle for idle, may be dead: idle for more
// than a second (pgxpool's rule) or not used since a connection error. It
// records the current epoch in c.
func (d *pgDialect) shouldPing(c *pgx.Conn, idle time.Duration) bool {
	data := c.PgConn().CustomData()
	e := d.epoch.Load()
	seen, known := data[pgEpochKey].(int64)
	data[pgEpochKey] = e
	return idle > time.Second || (known && seen != e)
}

// redactURL hides a password in a URL.
func redactURL(raw string) string {
	if strings.Contains(raw, "password=") && !strings.Contains(raw, "://") {
		return "(connection string)" // libpq key=value form
	}
	return redact.URL(raw)
}
