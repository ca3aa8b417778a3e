package durable

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/wire"
)

// pgxExecer is a pgx transaction (pgx.Tx), or a connection in one.
type pgxExecer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// sqlExecer is a database/sql transaction (*sql.Tx).
type sqlExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Enqueue writes job as a row to push in tx, the caller's transaction on
// the first database of d: a pgx.Tx, or a *sql.Tx (PostgreSQL through
// pgx's stdlib or lib/pq when that database is PostgreSQL, modernc SQLite
// when it is SQLite). This is the transactional outbox: when tx commits,
// a Relay pushes the job to Redis once (within milliseconds: PostgreSQL
// notifies the relays at commit, SQLite is polled); when tx rolls back,
// the job never existed. Once pushed, the row is the job's durable row,
// as if the client had written it.
//
// Enqueue fills what Sidekiq's client would (a jid, "retry": true, the
// queue "default") and checks the job as the client does; created_at and
// enqueued_at are set when the job is pushed. A job carrying "at" (epoch
// seconds) in the future goes to the schedule set. The job is modified in
// place: its jid is job.JID(). The job's class need not be in
// Config.Classes: its row uses the class's extension, or the default.
//
// On PostgreSQL, Enqueue also runs pg_notify in tx (delivered at commit).
// The row is written in tx only: Enqueue does not use d's connections.
func (d *Durable) Enqueue(ctx context.Context, tx any, job *wire.Job) error {
	if job == nil {
		return errors.New("durable: enqueue: nil job")
	}
	if !job.Has("retry") {
		job.SetRetry(true)
	}
	if !job.Has("queue") {
		job.SetQueue("default")
	}
	if !job.Has("jid") {
		job.SetJID(wire.NewJID())
	}
	if v, ok := job.Get("at"); ok {
		if _, isNum := v.Float(); !isNum {
			return fmt.Errorf("durable: enqueue %s: \"at\" must be epoch seconds", job.JID())
		}
	}
	if err := contract.Validate(job); err != nil {
		return fmt.Errorf("durable: enqueue: %w", err)
	}
	up, err := d.rowFor(&insertParams{Job: job})
	if err != nil {
		return err
	}
	q, args, notify := d.stores[0].OutboxInsert(up)
	switch tx := tx.(type) {
	case pgxExecer:
		if _, err = tx.Exec(ctx, q, args...); err == nil && notify != "" {
			_, err = tx.Exec(ctx, notify)
		}
	case sqlExecer:
		if _, err = tx.ExecContext(ctx, q, args...); err == nil && notify != "" {
			_, err = tx.ExecContext(ctx, notify)
		}
	default:
		return fmt.Errorf("durable: enqueue %s: %T is not a transaction (want pgx.Tx or *sql.Tx)", job.JID(), tx)
	}
	if err != nil {
		return fmt.Errorf("durable: enqueue %s: %w", job.JID(), err)
	}
	return nil
}

// runAtOf returns a job's "at" (epoch seconds) and whether it has one.
func runAtOf(job *wire.Job) (float64, bool) {
	v, ok := job.Get("at")
	if !ok {
		return 0, false
	}
	return v.Float()
}
