package durable

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// An Outbox writes jobs in the caller's database transactions, of type T,
// on the first database of its Durable: the transactional outbox. Make
// one with PgxOutbox (pgx.Tx) or SQLOutbox (*sql.Tx: PostgreSQL through
// pgx's stdlib or lib/pq, modernc SQLite), once, and share it.
type Outbox[T any] struct {
	d    *Durable
	exec func(ctx context.Context, tx T, q string, args ...any) error
}

// PgxOutbox returns d's outbox for pgx transactions.
func PgxOutbox(d *Durable) *Outbox[pgx.Tx] {
	return &Outbox[pgx.Tx]{d: d, exec: func(ctx context.Context, tx pgx.Tx, q string, args ...any) error {
		_, err := tx.Exec(ctx, q, args...)
		return err
	}}
}

// SQLOutbox returns d's outbox for database/sql transactions.
func SQLOutbox(d *Durable) *Outbox[*sql.Tx] {
	return &Outbox[*sql.Tx]{d: d, exec: func(ctx context.Context, tx *sql.Tx, q string, args ...any) error {
		_, err := tx.ExecContext(ctx, q, args...)
		return err
	}}
}

// Enqueue writes job as a row to push in tx, the caller's transaction on
// the first database of the outbox's Durable. When tx commits,
// a relay (NewRelay) pushes the job to Redis once (within milliseconds: PostgreSQL
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
// The row is written in tx only: Enqueue does not use the Durable's
// connections.
func (o *Outbox[T]) Enqueue(ctx context.Context, tx T, job *wire.Job) error {
	d := o.d
	if job == nil {
		return errors.New("durable: enqueue: nil job")
	}
	if !job.Has("retry") {
		job.Set("retry", rubyjson.BoolValue(true))
	}
	if !job.Has("queue") {
		job.SetQueue("default")
	}
	if !job.Has("jid") {
		job.Set("jid", rubyjson.StringValue(contract.NewJID()))
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
	if err = o.exec(ctx, tx, q, args...); err == nil && notify != "" {
		err = o.exec(ctx, tx, notify)
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
