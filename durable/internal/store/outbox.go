package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"
)

// OutboxMark is the locked_by of a row written in a caller's transaction
// whose job is still to be pushed to Redis (the outbox). Its locked_at is
// the end of the lease a relay holds on it (NULL: free). A Sidekiq
// identity ("host:pid:nonce", lib/sidekiq/component.rb) never has this
// form. The state lives in Amigo's own columns, so the table needs no
// new column: a Ruby poller sees an ordinary row, and a Ruby producer
// writes it with a plain INSERT (docs/durable.md).
const OutboxMark = "gojob:outbox"

// outboxChannel is the PostgreSQL NOTIFY channel a transaction that
// writes an outbox row notifies, so that relays push it as soon as it
// commits (a notification is delivered at commit, never for a rolled-back
// transaction).
const outboxChannel = "gojob_durable_outbox"

// outboxIndexName names the partial index of the rows to push, which
// keeps a relay's scan as cheap as the outbox is short.
func outboxIndexName(table string) string { return table + "_outbox_idx" }

// errNoListen is returned by OutboxListen for a database without
// notifications (SQLite): relays poll it.
var errNoListen = errors.New("durable: database has no notifications")

// OutboxInsert returns the statement and arguments that write p as a row
// to push, for the caller to run in its own transaction, and the
// statement that notifies the relays ("" when the database has none; run
// it in the same transaction). The statement uses ? placeholders on
// SQLite and $n on PostgreSQL.
func (s *sqlStore) OutboxInsert(p UpsertParams) (insert string, args []any, notify string) {
	args = []any{p.JobID, p.JobClass, p.ItemJSON, p.Queue, s.t(p.InsertedAt), s.t(p.AssumeDeadAt), OutboxMark}
	if s.d.kind() == "postgres" {
		notify = `SELECT pg_notify('` + outboxChannel + `', '')`
	}
	return s.qOutboxInsert, args, notify
}

// OutboxLease takes a lease until p.Until on up to p.Limit rows to push
// whose lease is free or over, oldest first, and returns them. On
// PostgreSQL the rows are chosen FOR UPDATE SKIP LOCKED, so relays running
// at once take disjoint rows; SQLite has one writer.
//
// It first looks for such a row with a read (the partial index), so that
// an idle relay's scans take no write lock: SQLite's single writer is the
// group commit's.
func (s *sqlStore) OutboxLease(ctx context.Context, p OutboxLeaseParams) ([]*OutboxRow, error) {
	var out []*OutboxRow
	found := false
	err := s.op(ctx, func(ctx context.Context) error {
		return s.d.each(ctx, s.qOutboxAny, []any{s.t(p.Now)}, func(func(...any) error) error { found = true; return nil })
	})
	if err != nil || !found {
		return nil, err
	}
	s.counted(1)
	err = s.op(ctx, func(ctx context.Context) error {
		out = out[:0]
		return s.d.each(ctx, s.qOutboxLease, []any{s.t(p.Until), s.t(p.Now), p.Limit}, func(scan func(...any) error) error {
			r := &OutboxRow{}
			out = append(out, r)
			return scan(&r.JobID, &r.ItemJSON, &r.Queue)
		})
	})
	return out, err
}

// OutboxPushed makes the rows of jobIDs, pushed, ordinary durable rows:
// the mark and lease are cleared where they are still set (a job that
// started meanwhile has its own lock, and its row may be gone).
func (s *sqlStore) OutboxPushed(ctx context.Context, jobIDs []string) error {
	for len(jobIDs) > 0 {
		n := min(len(jobIDs), 500)
		args := make([]any, 0, n)
		for _, id := range jobIDs[:n] {
			args = append(args, id)
		}
		q := s.d.rebind(`UPDATE ` + s.table + ` SET locked_by = NULL, locked_at = NULL WHERE locked_by = '` + OutboxMark +
			`' AND job_id IN ` + placeholders(1, n))
		if _, err := s.exec(ctx, q, args...); err != nil {
			return err
		}
		jobIDs = jobIDs[n:]
	}
	return nil
}

// OutboxListen listens on outboxChannel and calls wake for each
// notification until ctx ends or the connection fails. SQLite returns
// errNoListen.
func (s *sqlStore) OutboxListen(ctx context.Context, ready, wake func()) error {
	pg, ok := s.d.(*pgDialect)
	if !ok {
		return errNoListen
	}
	return pgListen(ctx, pg.pool, ready, wake)
}

func pgListen(ctx context.Context, pool *pgxpool.Pool, ready, wake func()) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection has session state (LISTEN): it is not given back.
	c := conn.Hijack()
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := c.Exec(ctx, `LISTEN `+outboxChannel); err != nil {
		return err
	}
	ready()
	for {
		if _, err := c.WaitForNotification(ctx); err != nil {
			return err
		}
		wake()
	}
}

// outboxSQL builds the outbox statements of a table (quoted) in the
// dialect's placeholders.
func (s *sqlStore) outboxSQL(r func(string) string, t string) {
	s.qOutboxInsert = r(`INSERT INTO ` + t + ` (job_id, job_class, job_item_json, queue, inserted_at, assume_dead_at, locked_by)
VALUES (?, ?, ?, ?, ?, ?, ?)`)
	s.qOutboxAny = r(`SELECT 1 FROM ` + t + ` WHERE locked_by = '` + OutboxMark + `' AND (locked_at IS NULL OR locked_at <= ?) LIMIT 1`)
	skipLocked := ""
	if s.d.kind() == "postgres" {
		skipLocked = " FOR UPDATE SKIP LOCKED"
	}
	s.qOutboxLease = r(`UPDATE ` + t + ` SET locked_at = ? WHERE job_id IN (SELECT job_id FROM ` + t + `
WHERE locked_by = '` + OutboxMark + `' AND (locked_at IS NULL OR locked_at <= ?)
ORDER BY inserted_at LIMIT ?` + skipLocked + `) AND locked_by = '` + OutboxMark + `'
RETURNING job_id, job_item_json, queue`)
}

// outboxIndexSQL creates the partial index of the rows to push.
func outboxIndexSQL(table, qtable string) string {
	return `CREATE INDEX IF NOT EXISTS ` + quoteIdent(outboxIndexName(table)) + ` ON ` + qtable +
		` (inserted_at) WHERE locked_by = '` + OutboxMark + `'`
}
