package store

import (
	"context"
	"slices"
	"time"
)

// The reconciler's compare-and-set writes for a whole page: one statement
// per kind (PostgreSQL: over arrays; SQLite: over VALUES, in chunks)
// instead of one per row.

func (s *sqlStore) TouchMany(ctx context.Context, ps []TouchParams) ([]bool, error) {
	return casMany(ctx, s, ps, func(p TouchParams) string { return p.JobID }, func(hit func(q string, args ...any) error) error {
		if s.Kind() == "postgres" {
			ids, expect, dead, missing := make([]string, len(ps)), make([]time.Time, len(ps)), make([]time.Time, len(ps)), make([]*time.Time, len(ps))
			for i, p := range ps {
				ids[i], expect[i], dead[i], missing[i] = p.JobID, Micro(p.Expect), Micro(p.AssumeDeadAt), microPtr(p.MissingAt)
			}
			return hit(`UPDATE `+s.table+` AS d SET assume_dead_at = x.dead, missing_at = x.missing
FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[], $4::timestamptz[]) AS x(job_id, expect, dead, missing)
WHERE d.job_id = x.job_id AND d.assume_dead_at = x.expect RETURNING d.job_id`, ids, expect, dead, missing)
		}
		for part := range slices.Chunk(ps, sqliteChunk) {
			args := make([]any, 0, 4*len(part))
			for _, p := range part {
				args = append(args, p.JobID, s.t(p.Expect), s.t(p.AssumeDeadAt), s.tp(p.MissingAt))
			}
			err := hit(`UPDATE `+s.table+` SET assume_dead_at = x.column3, missing_at = x.column4
FROM (VALUES `+placeholders(len(part), 4)+`) AS x WHERE `+s.table+`.job_id = x.column1 AND `+s.table+`.assume_dead_at = x.column2
RETURNING `+s.table+`.job_id`, args...)
			if err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *sqlStore) ClaimMany(ctx context.Context, ps []ClaimParams) ([]bool, error) {
	return casMany(ctx, s, ps, func(p ClaimParams) string { return p.JobID }, func(hit func(q string, args ...any) error) error {
		if s.Kind() == "postgres" {
			ids, expect := make([]string, len(ps)), make([]time.Time, len(ps))
			for i, p := range ps {
				ids[i], expect[i] = p.JobID, Micro(p.Expect)
			}
			return hit(`DELETE FROM `+s.table+` AS d USING unnest($1::text[], $2::timestamptz[]) AS x(job_id, expect)
WHERE d.job_id = x.job_id AND d.assume_dead_at = x.expect RETURNING d.job_id`, ids, expect)
		}
		for part := range slices.Chunk(ps, sqliteChunk) {
			args := make([]any, 0, 2*len(part))
			for _, p := range part {
				args = append(args, p.JobID, s.t(p.Expect))
			}
			err := hit(`DELETE FROM `+s.table+` WHERE (job_id, assume_dead_at) IN (VALUES `+placeholders(len(part), 2)+`) RETURNING job_id`, args...)
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// casMany runs, in one op, the compare-and-set write of a page of rows
// (jobID gives each row's job id): run sends the write's statements
// through hit, which counts each and marks the rows whose job_id it
// returns. It returns, by row, whether the write hit it.
func casMany[P any](ctx context.Context, s *sqlStore, ps []P, jobID func(P) string, run func(hit func(q string, args ...any) error) error) ([]bool, error) {
	out := make([]bool, len(ps))
	if len(ps) == 0 {
		return out, nil
	}
	idx := make(map[string]int, len(ps))
	for i, p := range ps {
		idx[jobID(p)] = i
	}
	err := s.op(ctx, func(ctx context.Context) error {
		return run(func(q string, args ...any) error {
			s.counted(1)
			return s.collect(ctx, out, idx, q, args...)
		})
	})
	return out, err
}

// collect runs a statement returning job_ids and marks them in out.
func (s *sqlStore) collect(ctx context.Context, out []bool, idx map[string]int, q string, args ...any) error {
	return s.d.each(ctx, q, args, func(scan func(...any) error) error {
		var jid string
		if err := scan(&jid); err != nil {
			return err
		}
		if i, ok := idx[jid]; ok {
			out[i] = true
		}
		return nil
	})
}
