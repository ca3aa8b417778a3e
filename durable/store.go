package durable

import (
	"context"
	"time"

	"github.com/gojob/gojob/sidekiq"
)

// store is one storage database holding the durable_jobs table. It is the
// unexported, unstable seam between the durable logic and a SQL dialect
// (PostgreSQL or SQLite); every implementation must pass storeSuite.
//
// Every time is truncated to microseconds before it is written, so a value
// read back compares equal to the one written (the compare-and-set methods
// rely on it).
type store interface {
	// name is the database URL without its password, for logs and status.
	name() string
	// kind is "postgres" or "sqlite".
	kind() string
	// migrate creates the table when missing and adds missing_at to tables
	// made before it existed.
	migrate(ctx context.Context) (*migrateOutcome, error)
	// upsert inserts a row or, for a jid already present, refreshes it as a
	// new push of that job: assume_dead_at, job_item_json and queue are
	// replaced and missing_at, locked_by and locked_at are cleared.
	upsert(ctx context.Context, p upsertParams) error
	// upsertCreated is upsert that also reports whether it created the row
	// (no row had that jid in this database).
	upsertCreated(ctx context.Context, p upsertParams) (bool, error)
	// upsertMany is upsertCreated for many rows at once (distinct jids),
	// with an answer per row.
	upsertMany(ctx context.Context, ps []upsertParams) (created []bool, errs []error)
	// lock marks the row as run by a process. It reports whether the row
	// exists.
	lock(ctx context.Context, p lockParams) (bool, error)
	// lockOp is lock with the caller's op (kind gcLock, lk set), so that
	// the caller can keep it in an allocation of its own. The op is
	// written once and not reused.
	lockOp(ctx context.Context, op *gcOp) (bool, error)
	// lockStart queues lockOp's write and returns at once; lockWait waits
	// for its answer. lockStart fails only when the store is closed.
	lockStart(op *gcOp) error
	lockWait(ctx context.Context, op *gcOp) (bool, error)
	// unlock clears the lock after a failure, if the row is still held by
	// that lock. It reports whether it changed the row.
	unlock(ctx context.Context, p unlockParams) (bool, error)
	// heartbeat moves assume_dead_at. It reports whether the row exists.
	heartbeat(ctx context.Context, p heartbeatParams) (bool, error)
	// deleteLocked deletes the row after a success, if it is still held by
	// that lock. It reports whether it deleted it.
	deleteLocked(ctx context.Context, p deleteLockedParams) (bool, error)
	// deleteLockedAsync is deleteLocked of op (kind gcDelete, del set) that
	// returns at once and gives then the answer once the delete is
	// committed (or failed); when then returns true, ack is released after
	// it (with the acknowledgements of the other deletes written at the
	// same time, in one call). The op is written once and not reused.
	deleteLockedAsync(op *gcOp, ack sidekiq.DeferredAck, then gcThen)
	// deleteJob deletes the row whatever its state. It reports whether it
	// existed.
	deleteJob(ctx context.Context, jobID string) (bool, error)
	// listDue returns up to Limit rows with assume_dead_at <= Now, ordered
	// by (assume_dead_at, job_id), after the cursor when one is given.
	listDue(ctx context.Context, p listDueParams) ([]*row, error)
	// touch sets assume_dead_at and missing_at if assume_dead_at still has
	// the value read (compare-and-set). It reports whether it changed it.
	touch(ctx context.Context, p touchParams) (bool, error)
	// touchMany is touch for many rows (distinct jids) in one statement
	// per chunk; changed answers each.
	touchMany(ctx context.Context, ps []touchParams) (changed []bool, err error)
	// claimMany is claim for many rows (distinct jids).
	claimMany(ctx context.Context, ps []claimParams) (deleted []bool, err error)
	// claim deletes the row if assume_dead_at still has the value read
	// (compare-and-set). It reports whether it deleted it.
	claim(ctx context.Context, p claimParams) (bool, error)
	// restore puts back a row that claim deleted, unless the jid is present
	// again.
	restore(ctx context.Context, r *row) error
	// get returns one row, nil when absent.
	get(ctx context.Context, jobID string) (*row, error)
	// status counts the rows by state.
	status(ctx context.Context, now time.Time) (*DatabaseStatus, error)
	// close releases the connections.
	close() error
	// isConnError reports whether err means the database could not be
	// reached (the failover condition), as opposed to a SQL error.
	isConnError(err error) bool
}

// row is one durable_jobs row.
type row struct {
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

type upsertParams struct {
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

type lockParams struct {
	JobID        string
	LockedBy     string
	LockedAt     time.Time
	AssumeDeadAt time.Time
}

type unlockParams struct {
	JobID        string
	LockedBy     string
	LockedAt     time.Time
	AssumeDeadAt time.Time
	ItemJSON     string
}

type heartbeatParams struct {
	JobID        string
	AssumeDeadAt time.Time
}

type deleteLockedParams struct {
	JobID    string
	LockedBy string
	LockedAt time.Time
}

type listDueParams struct {
	Now   time.Time
	Limit int
	// After is the last row of the previous page, nil for the first page.
	After *row
}

type touchParams struct {
	JobID string
	// Expect is the assume_dead_at that was read.
	Expect       time.Time
	AssumeDeadAt time.Time
	MissingAt    *time.Time
}

type claimParams struct {
	JobID  string
	Expect time.Time
}

// migrateOutcome reports what migrate did on one database.
type migrateOutcome struct {
	// Created is true when the table did not exist.
	Created bool
	// AddedMissingAt is true when an old table got its missing_at column.
	AddedMissingAt bool
	// AddedIndex is true when the reconciler's index was created.
	AddedIndex bool
}

// dueIndexName names the index on (assume_dead_at, job_id) that Migrate
// adds to the table. Amigo leaves assume_dead_at unindexed because the
// table is write-heavy; gojob adds it because its reconciler reads the
// overdue rows in pages ordered by (assume_dead_at, job_id): without the
// index every page is a scan and sort of the whole table, so a pass costs
// the table's size times its pages, where with it a pass costs the rows
// that are due. The price is one more index entry per lock, heartbeat or
// reconciler touch (assume_dead_at changes, so PostgreSQL cannot make the
// update HOT); the group commit amortises it. Ruby processes sharing the
// table are unaffected.
func dueIndexName(table string) string { return table + "_assume_dead_at_idx" }

// micro truncates t to what the databases keep.
func micro(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func microPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	m := micro(*t)
	return &m
}
