// Package durable makes Sidekiq jobs durable the way Amigo::DurableJob
// (webhookdb) does, sharing its table with Ruby processes that use it, and
// closes the gaps of the Ruby implementation.
//
// Sidekiq's BasicFetch removes a job from Redis when a worker takes it, so
// a worker that is killed loses the jobs it runs; jobs also vanish when
// Redis loses data or someone deletes them. A durable job has a shadow row
// in a SQL table, written before the job reaches Redis and deleted when it
// succeeds. A Reconciler cross-checks overdue rows with Redis and moves
// lost jobs to the dead set, where a person can retry them.
//
// # Setup
//
//	d, err := durable.New(&durable.Config{
//		URLs:    []string{"postgres://app@db1/app", "postgres://app@db2/app"}, // or "sqlite:jobs.db"
//		Classes: map[string]time.Duration{"Billing": 0, "Backfill": 20 * time.Minute},
//	})
//	_, err = d.Migrate(ctx)                         // CREATE TABLE IF NOT EXISTS, + missing_at
//	client.Extend(d)                                 // every client that pushes durable jobs
//	srv.Extend(d)                                    // and its own client: in-job pushes, poller re-pushes
//	rec, _ := durable.NewReconciler(&durable.ReconcilerConfig{Durable: d, API: api})
//	poller, _ := durable.NewPoller(&durable.PollerConfig{Reconciler: rec, Pool: pool, Identity: srv.Identity()})
//	srv.Serve(poller)                                // one leader at a time, every 3 minutes, for the server's life
//	…                                                // at shutdown, after the server stopped:
//	d.Close()                                        // retries the writes an outage held back
//
// A long job calls sidekiq.Heartbeat(ctx) more often than its extension:
// each moves its row's deadline (at most once a quarter of the extension).
// `gojob work --durable --durable-class CLASS[=EXT] --durable-db URL` does
// all of this; `gojob durable migrate|poll|status` are the tools.
//
// # Storage
//
// The table (default public.durable_jobs, schema and name configurable) is
// exactly Amigo's: job_id text NOT NULL UNIQUE, job_class, job_item_json
// (the job as JSON text), queue (all text NOT NULL), inserted_at
// timestamptz NOT NULL DEFAULT now(), assume_dead_at timestamptz NOT NULL,
// locked_by text, locked_at and missing_at timestamptz. Amigo leaves
// assume_dead_at unindexed; Migrate adds an index on (assume_dead_at,
// job_id) for the reconciler's pages (store.DueIndexName in
// internal/store says why). Several databases are used in order: a row is
// written to the first that accepts it (a database that fails is
// skipped), looked up in each in turn, and then locked, heartbeated,
// unlocked and deleted where it was found. A push again of a job (the
// scheduler's or the retry poller's re-push) that creates its row in an
// earlier database than the one an outage sent the previous push to
// removes the copy left there, so that it does not outlive the job. The
// SQLite store (pure Go) keeps the same columns with times as fixed-width
// UTC text, for one host without a database server.
//
// # Group commit
//
// The three writes of every durable job (the push's upsert, the lock
// before it runs, the success delete) are gathered per database and
// written together: one statement per group on PostgreSQL (data-modifying
// CTEs over arrays), one transaction of multi-row statements on SQLite
// (its single writer). A group holds what arrived while the previous one
// was being written (Config.BatchWindow adds a wait, 0 by default), so
// under load one statement carries the writes of many jobs. After a group
// of locks the writer first waits, at most as long as that group took
// (and 2ms), for the jobs it released to ask for their next locks, so
// that the slots share one group instead of alternating in two (see
// groupCommit.next in internal/store); a push ends that wait. With the
// reliable fetch a job waiting for its lock lets its slot fetch its next
// jobs ahead (up to four), and their locks are queued on their arrival
// (lockAhead): the next groups are then written while the jobs the last
// one released run, and the writer does not wait for them. A PushBulk
// writes its group's rows (up to 1000) in one statement. Callers wait for
// their own write, so the invariants below hold; with reliable fetch the
// success delete does not hold the slot: the job stays in its in-progress
// list until its row is gone (its acknowledgement is deferred), so a kill
// in between leaves it recoverable.
//
// # Outages
//
// A database can stop answering while a job whose row it holds runs. The
// writes that finish a row, the success delete, the failure unlock with
// the error record, and the removal of a stale copy (left in a database
// that did not answer a push again of the job, which therefore wrote its
// row to a later one, or in one that did not answer the lock of a job that
// then completed), are then not lost: one that fails with a connection
// error (or a timeout, or SQLite's busy) is kept in memory and retried in
// the background, per database, with a backoff from 1 to 30 seconds, until
// the database answers. One write is kept per row: a later write of the
// same jid in the same database replaces it (but a delete or unlock does
// not replace a pending removal of a stale copy; a push that writes the
// row again cancels it), and every write of this process to a jid (a
// push, a lock) first applies that jid's pending writes, so they land in
// order. An SQL error drops the write (logged):
// the database answered. The queue holds Config.MaxPendingWrites writes
// (100,000); beyond that a write is dropped and logged at error level.
// Durable.Close, at shutdown (`gojob work` calls it), tries the queue once
// more within Config.OpTimeout and logs each write left at error level, with
// jid and database, for an operator to delete the row by hand.
//
// The reconciler of the process that holds a pending write for a row
// does not mark or kill that row: it tries the write again and leaves the
// row for the next pass. Other processes cannot know of it. Their
// reconcilers see the row only once the database answers them, and need
// two passes at least an extension apart before they kill, while the
// retry lands within 30 seconds of the database answering this process:
// safe unless an extension is shorter than that, or a partition keeps
// this process from a database that the other processes reach for longer
// than an extension. The queue is in memory. With reliable fetch, a
// completed job whose delete is pending stays in its in-progress list
// until the delete lands (its acknowledgement is held), so a process that
// dies during the outage leaves it recoverable: it runs again and deletes
// its row. What a crash can still lose is the rest of the queue: failure
// unlocks (the row keeps its lock and lacks the error; the job itself is
// in the retry set, where the reconciler finds it) and stale-copy
// removals (the copy may later be reported lost), and, with basic fetch,
// success deletes (the completed job is then reported lost). No job is
// ever only in this queue.
//
// # Outbox
//
// Enqueue writes a job's row in the caller's transaction, marked to push
// (locked_by = 'gojob:outbox'); a relay (NewRelay) leases committed marked rows,
// pushes each job with a Lua step that also sets a marker of its jid, and
// clears the mark, after which the row is an ordinary WAITING row. A relay
// that dies after the push and before the clear leaves the marker, so the
// next relay's push of that row is a no-op: a committed job reaches Redis
// once, a rolled-back one never (docs/durable.md, "Outbox").
//
// # States of a row
//
//	 Enqueue in a transaction ──commit──► TO PUSH ── Relay: push once, clear the mark ──► WAITING
//
//	         push (client middleware: upsert, deadline = run time + ext)
//	               │
//	               ▼
//	┌──────────► WAITING ──── lock (server middleware) ────► LOCKED
//	│  retry/      │  ▲          deadline = now + ext            │  │
//	│  re-push     │  │ found in queue, retry, schedule          │  │ success: row deleted
//	│  (upsert)    │  │ or a live work hash: deadline moved      │  │ error: unlock, error
//	│              ▼  │                                          │  │ fields in job_item_json,
//	│           OVERDUE (deadline passed) ◄── no heartbeat ──────┘  │ deadline = now + ext
//	│              │                                                ▼
//	│              │ not found anywhere: missing_at = now,       WAITING (retry set)
//	│              ▼ deadline = now + ext
//	└───────── MISSING ── found again: missing_at cleared ──► WAITING
//	               │
//	               │ overdue and still not found (second strike)
//	               ▼
//	 dead set (item + jid + durable_killed_at, with the trims),
//	 failure notifier or death handlers, row deleted
//
// A row found in the dead set is deleted (a retry from there pushes a new
// row). The reconciler does not look at rows to push. With Config.Adopt,
// a job of a durable class that starts without a row gets one, locked.
// `gojob durable status` counts rows in these states.
//
// # Invariants
//
//   - The row is written before the job reaches Redis (the push happens
//     after the whole client chain), so a worker never runs a durable job
//     whose row is still to come, and a job is never in Redis without its
//     row unless no database accepted it (then an error is logged and the
//     job is pushed anyway: a push never fails because of the databases).
//   - A job is moved to the dead set only after two reconciler passes,
//     at least one extension apart, both failed to find it in its queue,
//     the work hashes of live processes, the in-progress lists of reliable
//     fetch (a dead process's jobs there are about to be recovered), the
//     retry set, the schedule set and the dead set.
//   - Every reconciler change is a compare-and-set on the assume_dead_at
//     it read. Locking, heartbeating, unlocking and re-pushing all move
//     assume_dead_at, so a job that started, failed or was pushed again
//     during a pass is left for the next one, and two reconcilers (or a
//     Ruby poller) never kill the same job twice.
//   - The success delete and the error unlock only apply to the lock the
//     middleware took (locked_by and locked_at unchanged): a push of the
//     same jid from inside the job (Amigo's retry helper) replaces the lock
//     and its row survives the job's success. Retried after an outage
//     (see Outages), they keep that condition.
//   - A row's failure never stops a pass: an unknown class gets the
//     default extension, an unreadable job_item_json is reported and left.
//   - Lookups are aimed at each row (score windows in the sets around the
//     time its deadline was set, the oldest jobs of its queue, the
//     registered in-progress lists; lookup.go), so a pass costs the rows
//     that are due, not the size of Redis. The rows these miss are
//     searched by streaming queues and sets once per pass before any strike
//     or kill: no size disables the reconciler; rows are read in pages.
//
// # Differences from Ruby
//
// Beyond the gaps above (jobs pushed from inside workers and by the
// poller get rows; running jobs are never killed; large sets do not
// disable the poll; unknown classes affect only their row; paging), the
// upsert also clears missing_at and the lock fields and updates queue, a
// lock clears missing_at, deletes and unlocks are conditional (on
// PostgreSQL with one database a job starts before its lock is committed,
// and a success before the lock was written deletes the row in the lock's
// place, whatever its lock: docs/durable.md, "gojob at scale"), and
// durable_killed_at is written in the Sidekiq timestamp format of the
// target version (epoch seconds, or milliseconds for 8.x) instead of a
// Ruby Time string. Ruby's enabled setting is, in Go, whether the
// middleware is installed.
package durable
