// Package store keeps the durable_jobs table of one storage database,
// PostgreSQL (pgx) or SQLite (modernc, through database/sql), behind one
// interface, Store. The hot writes (a push's upsert, the lock before a
// job runs, the success delete) go through a group commit (group.go,
// Store.Group): writes that arrive while a group is being written share
// the next one.
// Pending keeps the writes that finish jobs' rows while their database
// does not answer.
//
// The package knows SQL and nothing of Sidekiq: what a row means, which
// database a write goes to and when, is the durable package's.
package store

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Store is one storage database holding the durable_jobs table. Every
// implementation must pass the suite of store_test.go.
//
// Every time is truncated to microseconds before it is written, so a value
// read back compares equal to the one written (the compare-and-set methods
// rely on it).
type Store interface {
	// Name is the database URL without its password, for logs and status.
	Name() string
	// Kind is "postgres" or "sqlite".
	Kind() string
	// Migrate creates the table when missing, adds missing_at to tables
	// made before it existed and the reconciler's index (DueIndexName).
	Migrate(ctx context.Context) (*MigrateOutcome, error)
	// Upsert inserts a row or, for a jid already present, refreshes it as
	// a new push of that job: assume_dead_at, job_item_json and queue are
	// replaced and missing_at, locked_by and locked_at are cleared. It
	// reports whether it created the row (no row had that jid in this
	// database). It goes through the group commit.
	Upsert(ctx context.Context, p UpsertParams) (created bool, err error)
	// UpsertMany is Upsert for many rows at once (distinct jids), with an
	// answer per row.
	UpsertMany(ctx context.Context, ps []UpsertParams) (created []bool, errs []error)
	// Group is the group commit through which Upsert and DeleteLocked
	// write: the lock before a job runs, the asynchronous success delete
	// and the delete that replaces a lock not yet written are given to it
	// directly, as Ops in the caller's allocation.
	Group() *Group
	// Unlock clears the lock after a failure, if the row is still held by
	// that lock. It reports whether it changed the row.
	Unlock(ctx context.Context, p UnlockParams) (bool, error)
	// Heartbeat moves assume_dead_at. It reports whether the row exists.
	Heartbeat(ctx context.Context, p HeartbeatParams) (bool, error)
	// DeleteLocked deletes the row after a success, if it is still held
	// by that lock. It reports whether it deleted it.
	DeleteLocked(ctx context.Context, p DeleteParams) (bool, error)
	// DeleteJob deletes the row whatever its state. It reports whether it
	// existed.
	DeleteJob(ctx context.Context, jobID string) (bool, error)
	// ListDue returns up to Limit rows with assume_dead_at <= Now, ordered
	// by (assume_dead_at, job_id), after the cursor when one is given.
	ListDue(ctx context.Context, p ListDueParams) ([]*Row, error)
	// TouchMany sets assume_dead_at and missing_at of each row (distinct
	// jids) if its assume_dead_at still has the value read
	// (compare-and-set), in one statement per chunk; changed answers each.
	TouchMany(ctx context.Context, ps []TouchParams) (changed []bool, err error)
	// Claim deletes the row if assume_dead_at still has the value read
	// (compare-and-set). It reports whether it deleted it.
	Claim(ctx context.Context, p ClaimParams) (bool, error)
	// ClaimMany is Claim for many rows (distinct jids).
	ClaimMany(ctx context.Context, ps []ClaimParams) (deleted []bool, err error)
	// Restore puts back a row that Claim deleted, unless the jid is
	// present again.
	Restore(ctx context.Context, r *Row) error
	// Get returns one row, nil when absent.
	Get(ctx context.Context, jobID string) (*Row, error)
	// Status counts the rows by state.
	Status(ctx context.Context, now time.Time) (*Counts, error)
	// Stats counts what the store sent to its database.
	Stats() Stats
	// DropTable drops the table.
	DropTable(ctx context.Context) error
	// Close writes the queued group, then releases the connections.
	Close() error
	// OutboxInsert, OutboxLease, OutboxPushed and OutboxListen are the
	// outbox (outbox.go).
	OutboxInsert(p UpsertParams) (insert string, args []any, notify string)
	OutboxLease(ctx context.Context, p OutboxLeaseParams) ([]*OutboxRow, error)
	OutboxPushed(ctx context.Context, jobIDs []string) error
	// OutboxListen calls ready once it listens, then wake per notification.
	OutboxListen(ctx context.Context, ready, wake func()) error
	// IsConnError reports whether err means the database could not be
	// reached (the failover condition), as opposed to an SQL error.
	IsConnError(err error) bool
}

// Options configure a store.
type Options struct {
	// Schema is the PostgreSQL schema of the table; SQLite ignores it.
	Schema string
	// Table is the table name.
	Table string
	// ConnectTimeout bounds a PostgreSQL connection attempt.
	ConnectTimeout time.Duration
	// OpTimeout bounds one statement; a database that does not answer in
	// time counts as unreachable.
	OpTimeout time.Duration
	// MaxConns is the connection limit of a PostgreSQL database, the
	// group commit's connection included.
	MaxConns int
	// BatchWindow is how long a group may wait for more writes while the
	// database is idle; MaxBatch bounds a group (default 1000).
	BatchWindow time.Duration
	MaxBatch    int
	// Release is given, in one call per group, the Thens of the group's
	// asynchronous deletes that returned true. It must not keep the slice.
	Release func([]Then)
}

// Row is one durable_jobs row.
type Row struct {
	JobID        string
	JobClass     string
	ItemJSON     string
	Queue        string
	InsertedAt   time.Time
	AssumeDeadAt time.Time
	LockedBy     *string
	LockedAt     *time.Time
	MissingAt    *time.Time
}

// UpsertParams is a push's row.
type UpsertParams struct {
	JobID        string
	JobClass     string
	ItemJSON     string
	Queue        string
	InsertedAt   time.Time
	AssumeDeadAt time.Time
	// MissingAt is normally nil; tests set it to build a row that has
	// already had its first strike.
	MissingAt *time.Time
}

// LockParams is the lock a process takes before it runs a job.
type LockParams struct {
	JobID        string
	LockedBy     string
	LockedAt     time.Time
	AssumeDeadAt time.Time
}

// UnlockParams is the unlock of a failed job, with its error record.
type UnlockParams struct {
	JobID        string
	LockedBy     string
	LockedAt     time.Time
	AssumeDeadAt time.Time
	ItemJSON     string
}

// HeartbeatParams moves a row's deadline.
type HeartbeatParams struct {
	JobID        string
	AssumeDeadAt time.Time
}

// DeleteParams is the success delete of the row a lock holds.
type DeleteParams struct {
	JobID    string
	LockedBy string
	LockedAt time.Time
}

// ListDueParams selects a page of overdue rows.
type ListDueParams struct {
	Now   time.Time
	Limit int
	// After is the last row of the previous page, nil for the first page.
	After *Row
}

// TouchParams is a reconciler's compare-and-set of a row's deadline.
type TouchParams struct {
	JobID string
	// Expect is the assume_dead_at that was read.
	Expect       time.Time
	AssumeDeadAt time.Time
	MissingAt    *time.Time
}

// ClaimParams is a reconciler's compare-and-set delete.
type ClaimParams struct {
	JobID  string
	Expect time.Time
}

// MigrateOutcome reports what Migrate did on one database.
type MigrateOutcome struct {
	// Created is true when the table did not exist.
	Created bool
	// AddedMissingAt is true when an old table got its missing_at column.
	AddedMissingAt bool
	// AddedIndex is true when the reconciler's index was created.
	AddedIndex bool
}

// Counts are a database's rows by state (see durable.DatabaseStatus).
type Counts struct {
	Total, Locked, Waiting, Missing, Overdue int64
	// ToPush counts the outbox rows whose job is still to be pushed.
	ToPush int64
	// NextDue is the earliest assume_dead_at, nil for an empty table.
	NextDue *time.Time
}

// Stats counts what a store sent to its database.
type Stats struct {
	// Statements counts SQL statements (BEGIN and COMMIT excluded).
	Statements int64
	// Commits counts transactions: one per statement outside a
	// transaction, one per explicit transaction.
	Commits int64
	// GroupWrites counts the writes that went through the group commit.
	GroupWrites int64
}

// DueIndexName names the index on (assume_dead_at, job_id) that Migrate
// adds to the table. Amigo leaves assume_dead_at unindexed because the
// table is write-heavy; gojob adds it because its reconciler reads the
// overdue rows in pages ordered by (assume_dead_at, job_id): without the
// index every page is a scan and sort of the whole table, so a pass costs
// the table's size times its pages, where with it a pass costs the rows
// that are due. The price is one more index entry per lock, heartbeat or
// reconciler touch (assume_dead_at changes, so PostgreSQL cannot make the
// update HOT); the group commit amortises it. Ruby processes sharing the
// table are unaffected.
func DueIndexName(table string) string { return table + "_assume_dead_at_idx" }

// IsMissingTable reports whether err says the table does not exist:
// PostgreSQL's undefined_table (SQLSTATE 42P01), SQLite's "no such table".
func IsMissingTable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "42P01"
	}
	return err != nil && strings.Contains(err.Error(), "no such table")
}

// Micro truncates t to what the databases keep.
func Micro(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func microPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	m := Micro(*t)
	return &m
}

// Group is a store's group commit as its callers see it: the writes that
// finish a job's row (its lock, its success delete), given as Ops the
// caller allocates, waited for, started and waited for later, or answered
// through a Then. Writes that arrive while a group is being written share
// the next one.
type Group struct {
	gc *groupCommit
	// replaces is set when the dialect writes the deletes that replaced a
	// lock (DeleteInsteadOfLock).
	replaces bool
}

// Then receives the answer of an op queued with Group.DeleteAsync, on the
// goroutine that wrote its group; release reports whether the op's
// acknowledgement may be released now (by Options.Release).
type Then interface {
	Answered(ok bool, err error) (release bool)
}

// OutboxLeaseParams leases rows to push.
type OutboxLeaseParams struct {
	// Now: leases that ended by then are free.
	Now time.Time
	// Until is the end of the new lease.
	Until time.Time
	Limit int
}

// OutboxRow is a row to push.
type OutboxRow struct {
	JobID    string
	ItemJSON string
	Queue    string
}
