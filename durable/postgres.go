package durable

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/gojob/gojob/internal/redact"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// pgDialect is PostgreSQL through pgx, with Amigo::DurableJob's exact
// table so Ruby processes can share it.
type pgDialect struct{ schema, table string }

func (pgDialect) kind() string            { return "postgres" }
func (pgDialect) rebind(q string) string  { return rebindDollar(q) }
func (pgDialect) timeArg(t time.Time) any { return t }

// pgCreateTable is the DDL Sequel generates for Amigo's create_table (same
// columns, types, constraints and default, in Sequel's clause order). The
// UNIQUE constraint is named <table>_job_id_key by PostgreSQL, as in Ruby.
// Amigo leaves assume_dead_at without an index ("write-heavy table");
// Migrate adds one (dueIndexName).
const pgCreateTable = `CREATE TABLE IF NOT EXISTS %s ("job_id" text NOT NULL UNIQUE, "job_class" text NOT NULL, ` +
	`"job_item_json" text NOT NULL, "queue" text NOT NULL, "inserted_at" timestamptz DEFAULT now() NOT NULL, ` +
	`"assume_dead_at" timestamptz NOT NULL, "locked_by" text, "locked_at" timestamptz, "missing_at" timestamptz)`

func (d pgDialect) migrate(ctx context.Context, db *sql.DB, table string) (*migrateOutcome, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	// Two processes creating the table at once can collide in the catalog;
	// serialize migrations of this table.
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "gojob durable migrate "+table); err != nil {
		return nil, err
	}
	out := &migrateOutcome{}
	var exists, hasMissing bool
	err = tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.tables WHERE table_schema = $1 AND table_name = $2)`,
		d.schema, d.table).Scan(&exists)
	if err != nil {
		return nil, err
	}
	if !exists {
		if d.schema != "public" {
			if _, err := tx.ExecContext(ctx, `CREATE SCHEMA IF NOT EXISTS `+quoteIdent(d.schema)); err != nil {
				return nil, err
			}
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(pgCreateTable, table)); err != nil {
			return nil, err
		}
		out.Created = true
		if out.AddedIndex, err = d.ensureIndex(ctx, tx, table); err != nil {
			return nil, err
		}
		return out, tx.Commit()
	}
	err = tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 AND column_name = 'missing_at')`,
		d.schema, d.table).Scan(&hasMissing)
	if err != nil {
		return nil, err
	}
	if !hasMissing {
		if _, err := tx.ExecContext(ctx, `ALTER TABLE `+table+` ADD COLUMN IF NOT EXISTS "missing_at" timestamptz`); err != nil {
			return nil, err
		}
		out.AddedMissingAt = true
	}
	if out.AddedIndex, err = d.ensureIndex(ctx, tx, table); err != nil {
		return nil, err
	}
	return out, tx.Commit()
}

// ensureIndex adds the reconciler's index on (assume_dead_at, job_id),
// which Amigo's table does not have: see dueIndexName.
func (d pgDialect) ensureIndex(ctx context.Context, tx *sql.Tx, table string) (bool, error) {
	var exists bool
	err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = $1 AND tablename = $2 AND indexname = $3)`,
		d.schema, d.table, dueIndexName(d.table)).Scan(&exists)
	if err != nil || exists {
		return false, err
	}
	_, err = tx.ExecContext(ctx, `CREATE INDEX IF NOT EXISTS `+quoteIdent(dueIndexName(d.table))+` ON `+table+` (assume_dead_at, job_id)`)
	return err == nil, err
}

// isConnError is Sequel::DatabaseConnectionError's scope: the database
// could not be reached or dropped the connection, as opposed to an error
// in a statement.
func (pgDialect) isConnError(err error) bool {
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
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	return pgconn.SafeToRetry(err) || pgconn.Timeout(err)
}

// openPostgres opens a lazy pool (nothing is dialed until the first
// statement, like Sequel's test: false).
func openPostgres(rawURL, schema, table string, o *Config) (*sqlStore, error) {
	pc, err := pgx.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("durable: database %s: %w", redactURL(rawURL), err)
	}
	if pc.ConnectTimeout == 0 {
		pc.ConnectTimeout = o.ConnectTimeout
	}
	d := pgDialect{schema: schema, table: table}
	// The group commit's connections count in MaxConns.
	group := newPGGroupConns(pc, d.groupSlots())
	db := stdlib.OpenDB(*pc, stdlib.OptionShouldPing(group.sqlPing))
	db.SetMaxOpenConns(max(o.MaxConns-d.groupSlots(), 1))
	db.SetMaxIdleConns(min(o.MaxConns, 4))
	db.SetConnMaxIdleTime(5 * time.Minute)
	s := newSQLStore(db, d, quoteIdent(schema)+"."+quoteIdent(table), redactURL(rawURL), o.OpTimeout).withGroupCommit(o)
	s.pgGroup = group
	return s, nil
}

// redactURL hides a password in a URL.
func redactURL(raw string) string {
	if strings.Contains(raw, "password=") && !strings.Contains(raw, "://") {
		return "(connection string)" // libpq key=value form
	}
	return redact.URL(raw)
}
