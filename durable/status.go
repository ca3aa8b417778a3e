package durable

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNoTable is what a database's status error matches (errors.Is) when the
// durable table does not exist yet: Migrate (gojob durable migrate)
// creates it.
var ErrNoTable = errors.New("durable: no durable_jobs table yet")

// isMissingTable reports whether err says the table does not exist:
// PostgreSQL's undefined_table (SQLSTATE 42P01), SQLite's "no such table".
func isMissingTable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "42P01"
	}
	return err != nil && strings.Contains(err.Error(), "no such table")
}

// Status is the state of the rows in every database.
type Status struct {
	// Now is the time the states are relative to.
	Now time.Time
	// Databases has one entry per database, in order.
	Databases []DatabaseStatus
}

// DatabaseStatus counts one database's rows by state. Each row is in
// exactly one state, so the four counts add up to Total:
//
//   - Missing: the reconciler did not find the job once (missing_at set);
//     it is killed into the dead set at its next check unless found.
//   - Overdue: assume_dead_at has passed; the next pass checks it.
//   - Locked: a process runs it (locked_by set), deadline ahead.
//   - Waiting: queued, scheduled or retrying, deadline ahead.
type DatabaseStatus struct {
	// Database is the URL without its password.
	Database string `json:"database"`
	// Kind is "postgres" or "sqlite".
	Kind    string `json:"kind"`
	Total   int64  `json:"total"`
	Locked  int64  `json:"locked"`
	Waiting int64  `json:"waiting"`
	Missing int64  `json:"missing"`
	Overdue int64  `json:"overdue"`
	// NextDue is the earliest assume_dead_at, nil for an empty table.
	NextDue *time.Time `json:"next_due,omitempty"`
	// Err is set when the database could not be read; the counts are then
	// zero.
	Err error `json:"-"`
}

// Status counts the rows of every database by state. A database that
// cannot be read has its Err set; the returned error is nil.
func (d *Durable) Status(ctx context.Context) (*Status, error) {
	now := d.cfg.Clock.Now()
	out := &Status{Now: now}
	for _, s := range d.stores {
		st, err := s.status(ctx, now)
		if isMissingTable(err) {
			err = fmt.Errorf("%w (create it with gojob durable migrate): %w", ErrNoTable, err)
		}
		if err != nil {
			out.Databases = append(out.Databases, DatabaseStatus{Database: s.name(), Kind: s.kind(),
				Err: fmt.Errorf("durable: status of %s: %w", s.name(), err)})
			continue
		}
		out.Databases = append(out.Databases, *st)
	}
	return out, nil
}

// RowsParams select the rows Rows lists.
type RowsParams struct {
	// Limit is the number of rows per database. Default 50.
	Limit int
}

// Rows lists each database's rows, earliest assume_dead_at first (the
// reconciler's order: overdue and missing rows come first), at most Limit
// per database. A database that cannot be read is reported in the joined
// error; the rows of the others are still returned.
func (d *Durable) Rows(ctx context.Context, p *RowsParams) ([]*Row, error) {
	limit := 50
	if p != nil && p.Limit > 0 {
		limit = p.Limit
	}
	// Every row is due by the end of time: listDue then lists them all.
	end := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	var out []*Row
	var errs []error
	for _, s := range d.stores {
		rows, err := s.listDue(ctx, listDueParams{Now: end, Limit: limit})
		if err != nil {
			errs = append(errs, fmt.Errorf("durable: rows of %s: %w", s.name(), err))
			continue
		}
		for _, r := range rows {
			out = append(out, exportRow(r, s.name()))
		}
	}
	return out, errors.Join(errs...)
}

// Stats counts what the Durable sent to its databases since it was
// opened, all databases together.
type Stats struct {
	// Statements counts SQL statements (BEGIN and COMMIT not included).
	Statements int64 `json:"statements"`
	// Commits counts transactions: a statement on its own, or one SQLite
	// group transaction.
	Commits int64 `json:"commits"`
	// GroupWrites counts the pushes' inserts, locks and success deletes
	// that went through the group commit.
	GroupWrites int64 `json:"group_writes"`
}

// Stats returns the counters of every database, added up.
func (d *Durable) Stats() Stats {
	var out Stats
	for _, s := range d.stores {
		if ss, ok := s.(*sqlStore); ok {
			out.Statements += ss.stats.statements.Load()
			out.Commits += ss.stats.commits.Load()
			out.GroupWrites += ss.stats.groupOps.Load()
		}
	}
	return out
}

// DropTable drops the table in every database (benchmarks and tools that
// made a table of their own).
func (d *Durable) DropTable(ctx context.Context) error {
	var errs []error
	for _, s := range d.stores {
		if ss, ok := s.(*sqlStore); ok {
			if _, err := ss.db.ExecContext(ctx, `DROP TABLE IF EXISTS `+ss.table); err != nil {
				errs = append(errs, fmt.Errorf("durable: drop %s in %s: %w", ss.table, s.name(), err))
			}
		}
	}
	return errors.Join(errs...)
}
