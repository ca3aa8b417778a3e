package store

import (
	"slices"
	"strings"
	"time"
)

// The group statements of each dialect. A group holds each jid at most
// once (groupCommit.take), so the statements never touch a row twice.

// pgGroupSQL writes a whole group in one statement: data-modifying CTEs
// over arrays (unnest), one per kind of write, with the same conditions as
// the single-row statements (qUpsert, qLock, qDeleteLocked; a delete with
// a NULL locked_by is one that replaced its job's lock, Op.anyLock:
// qDelete). Every part
// runs, with empty arrays when the group has no write of its kind, so the
// text never changes and pgx keeps it prepared per connection. A lock or
// delete is answered by its place in its arrays (WITH ORDINALITY, from 1),
// which gojob reads without looking its jid up; an upsert by its jid.
const pgGroupSQL = `WITH
ups AS (
 INSERT INTO %[1]s AS d (job_id, job_class, job_item_json, queue, inserted_at, assume_dead_at, missing_at)
 SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[], $7::timestamptz[])
 ON CONFLICT (job_id) DO UPDATE SET assume_dead_at = excluded.assume_dead_at, job_item_json = excluded.job_item_json,
 queue = excluded.queue, missing_at = excluded.missing_at, locked_by = NULL, locked_at = NULL
 RETURNING d.job_id, d.inserted_at),
lck AS (
 UPDATE %[1]s AS d SET locked_by = x.locked_by, locked_at = x.locked_at, assume_dead_at = x.assume_dead_at, missing_at = NULL
 FROM unnest($8::text[], $9::text[], $10::timestamptz[], $11::timestamptz[]) WITH ORDINALITY AS x(job_id, locked_by, locked_at, assume_dead_at, i)
 WHERE d.job_id = x.job_id
 RETURNING x.i),
del AS (
 DELETE FROM %[1]s AS d USING unnest($12::text[], $13::text[], $14::timestamptz[]) WITH ORDINALITY AS x(job_id, locked_by, locked_at, i)
 WHERE d.job_id = x.job_id AND (x.locked_by IS NULL OR (d.locked_by = x.locked_by AND d.locked_at = x.locked_at))
 RETURNING x.i)
SELECT 1, job_id, inserted_at, 0::bigint FROM ups
UNION ALL SELECT 2, NULL, NULL, i FROM lck
UNION ALL SELECT 3, NULL, NULL, i FROM del`

// groupOps is a group split by kind.
type groupOps struct {
	ups, lcks, dels []*Op
	byJID           map[string]*Op
}

// splitGroupPG splits a group for PostgreSQL's statement: the upserts in
// queue order, the locks and deletes sorted by jid.
//
// Upserts in queue order give a bulk push's new rows heap places in push
// order. Jobs are fetched about in push order, so the locks and deletes
// of a drain's group then fall on a few neighbouring heap pages instead
// of one page each (sorted by jid, a push of 1000 rows was spread over
// all of its pages). Locks and deletes stay sorted, so two processes
// writing the same rows take their row locks in the same order; a group
// that still deadlocks with another statement (the same jids upserted in
// two orders at once, say) gets PostgreSQL's deadlock error, an SQL
// error, and groupCommit.write applies its ops one by one.
func splitGroupPG(ops []*Op) *groupOps {
	g := splitGroup(ops, false)
	byJID := func(a, b *Op) int { return strings.Compare(a.jid(), b.jid()) }
	slices.SortFunc(g.lcks, byJID)
	slices.SortFunc(g.dels, byJID)
	return g
}

// splitGroupInOrder splits a group by kind, each in queue order.
func splitGroupInOrder(ops []*Op) *groupOps { return splitGroup(ops, true) }

// splitGroup splits a group by kind, each in queue order, with every op
// in byJID (all), or only the upserts.
func splitGroup(ops []*Op, all bool) *groupOps {
	g := &groupOps{byJID: map[string]*Op{}}
	for _, op := range ops {
		op.ok = false
		if all || op.kind == opUpsert {
			g.byJID[op.jid()] = op
		}
		switch op.kind {
		case opUpsert:
			g.ups = append(g.ups, op)
		case opLock:
			g.lcks = append(g.lcks, op)
		case opDelete:
			g.dels = append(g.dels, op)
		}
	}
	return g
}

// answer records a returned row: created for an upsert (inserted_at is the
// one this push wrote), found or deleted otherwise.
func (g *groupOps) answer(jid string, inserted time.Time, insertedValid bool) {
	op := g.byJID[jid]
	if op == nil {
		return
	}
	if op.kind == opUpsert {
		op.ok = insertedValid && inserted.Equal(Micro(op.up.InsertedAt))
		return
	}
	op.ok = true
}
