package durable

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gojob/gojob/durable/internal/store"
)

// ErrNoTable is what a database's status error matches (errors.Is) when the
// durable table does not exist yet: Migrate (gojob durable migrate)
// creates it.
var ErrNoTable = errors.New("durable: no durable_jobs table yet")

// Status is the state of the rows in every database.
type Status struct {
	// Now is the time the states are relative to.
	Now time.Time
	// Databases has one entry per database, in order.
	Databases []DatabaseStatus
}

// DatabaseStatus counts one database's rows by state. Each row is in
// exactly one state, so the five counts add up to Total:
//
//   - ToPush: written by Enqueue in a committed transaction, its job not
//     yet pushed by a relay (NewRelay).
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
	ToPush  int64  `json:"to_push"`
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
		c, err := s.Status(ctx, now)
		if store.IsMissingTable(err) {
			err = fmt.Errorf("%w (create it with gojob durable migrate): %w", ErrNoTable, err)
		}
		st := DatabaseStatus{Database: s.Name(), Kind: s.Kind()}
		if err != nil {
			st.Err = fmt.Errorf("durable: status of %s: %w", s.Name(), err)
		} else {
			st.Total, st.Locked, st.Waiting, st.Missing, st.Overdue, st.ToPush, st.NextDue = c.Total, c.Locked, c.Waiting, c.Missing, c.Overdue, c.ToPush, c.NextDue
		}
		out.Databases = append(out.Databases, st)
	}
	return out, nil
}

// Rows lists each database's rows, earliest assume_dead_at first (the
// reconciler's order: overdue and missing rows come first), at most limit
// per database (50 when limit is not positive). Rows still to push (the
// outbox) are not listed: Status counts them. A database that cannot be read is reported in the joined
// error; the rows of the others are still returned.
func (d *Durable) Rows(ctx context.Context, limit int) ([]*Row, error) {
	if limit <= 0 {
		limit = 50
	}
	// Every row is due by the end of time: listDue then lists them all.
	end := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	var out []*Row
	var errs []error
	for _, s := range d.stores {
		rows, err := s.ListDue(ctx, store.ListDueParams{Now: end, Limit: limit})
		if err != nil {
			errs = append(errs, fmt.Errorf("durable: rows of %s: %w", s.Name(), err))
			continue
		}
		for _, r := range rows {
			out = append(out, exportRow(r, s.Name()))
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
		st := s.Stats()
		out.Statements += st.Statements
		out.Commits += st.Commits
		out.GroupWrites += st.GroupWrites
	}
	return out
}

// DropTable drops the table in every database (benchmarks and tools that
// made a table of their own).
func (d *Durable) DropTable(ctx context.Context) error {
	var errs []error
	for _, s := range d.stores {
		if err := s.DropTable(ctx); err != nil {
			errs = append(errs, fmt.Errorf("durable: drop %s in %s: %w", d.cfg.Table, s.Name(), err))
		}
	}
	return errors.Join(errs...)
}
