package batch

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Member is a member of a batch that has not succeeded: a job (or a child
// batch) still pending, or one that died, with where its job is now and
// its last error. The batch's members hash (gojob-batch-jobs:<bid>,
// written by batch/lua/push.lua and update.lua, Go and Ruby alike) names
// them and their state; the retry, schedule and dead sets hold the jobs
// that failed or wait.
type Member struct {
	// JID is the job's jid; empty for a child batch.
	JID string `json:"jid,omitempty"`
	// Batch is a child batch's id (its member "batch:<bid>").
	Batch string `json:"batch,omitempty"`
	// State is "pending" or "dead".
	State string `json:"state"`
	// Set is the sorted set the job is in: "retry" (failed, will be
	// retried), "schedule" (waiting to run) or "dead"; empty for a job in
	// a queue or running, for a child batch, and for a dead job no longer
	// in the dead set (deleted, retried or trimmed by its cap).
	Set string `json:"set,omitempty"`
	// At is the entry's score in Set: the next retry, the scheduled time or
	// the time of death.
	At *time.Time `json:"at,omitempty"`
	// Class, Queue, RetryCount, ErrorClass, ErrorMessage and FailedAt come
	// from the job's payload in Set.
	Class        string     `json:"class,omitempty"`
	Queue        string     `json:"queue,omitempty"`
	RetryCount   *int       `json:"retry_count,omitempty"`
	ErrorClass   string     `json:"error_class,omitempty"`
	ErrorMessage string     `json:"error_message,omitempty"`
	FailedAt     *time.Time `json:"failed_at,omitempty"`
	// Score is the exact score of the entry in Set (to address it, as the
	// dashboard's /retries/<score>-<jid>).
	Score float64 `json:"-"`
}

// Members lists the batch's members that have not succeeded: pending ones
// (failed and waiting for a retry first, then the others) and dead ones
// (newest death first), at most limit of each (0: all), with how many of
// each there are. The sets are read once each, not per job. It returns an
// error wrapping ErrNotFound when the batch does not exist.
func (b *Batches) Members(ctx context.Context, bid string, limit int) (pending, dead []*Member, nPending, nDead int, err error) {
	conn, err := b.cfg.Client.Pool().GetContext(ctx)
	if err != nil {
		return nil, nil, 0, 0, fmt.Errorf("batch: members of %s: %w", bid, err)
	}
	defer conn.Close()
	conn.Send("EXISTS", contract.BatchKey(bid))
	conn.Send("HGETALL", contract.BatchJobsKey(bid))
	if err := conn.Flush(); err != nil {
		return nil, nil, 0, 0, fmt.Errorf("batch: members of %s: %w", bid, err)
	}
	exists, err := redis.Int(redis.ReceiveContext(conn, ctx))
	if err != nil {
		return nil, nil, 0, 0, fmt.Errorf("batch: members of %s: %w", bid, err)
	}
	members, err := redis.StringMap(redis.ReceiveContext(conn, ctx))
	if err != nil {
		return nil, nil, 0, 0, fmt.Errorf("batch: members of %s: %w", bid, err)
	}
	if exists == 0 {
		return nil, nil, 0, 0, fmt.Errorf("batch: members of %s: %w", bid, ErrNotFound)
	}
	var pendingJIDs, deadJIDs []string
	for m, state := range members {
		if state != "pending" && state != "dead" {
			continue
		}
		mem := &Member{JID: m, State: state}
		if child, ok := strings.CutPrefix(m, "batch:"); ok {
			mem = &Member{Batch: child, State: state}
		}
		if state == "pending" {
			pending = append(pending, mem)
			if mem.JID != "" {
				pendingJIDs = append(pendingJIDs, mem.JID)
			}
		} else {
			dead = append(dead, mem)
			if mem.JID != "" {
				deadJIDs = append(deadJIDs, mem.JID)
			}
		}
	}
	// A pending job may be waiting for a retry or scheduled; a dead one
	// is in the dead set unless it left it.
	place := func(list []*Member, key string, jids []string) error {
		if len(jids) == 0 {
			return nil
		}
		found, err := contract.FindInSet(ctx, conn, key, jids)
		if err != nil {
			return err
		}
		for _, m := range list {
			if m.Set != "" || m.JID == "" {
				continue
			}
			if f, ok := found[m.JID]; ok {
				m.fill(key, f)
			}
		}
		return nil
	}
	for _, step := range []struct {
		list []*Member
		key  string
		jids []string
	}{{pending, contract.KeyRetry, pendingJIDs}, {pending, contract.KeySchedule, pendingJIDs}, {dead, contract.KeyDead, deadJIDs}} {
		if err := place(step.list, step.key, step.jids); err != nil {
			return nil, nil, 0, 0, fmt.Errorf("batch: members of %s: %w", bid, err)
		}
	}
	slices.SortFunc(pending, func(a, b *Member) int {
		// Failed ones first, next retry first; then by id.
		if c := cmp.Compare(setRank(a.Set), setRank(b.Set)); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Score, b.Score); c != 0 {
			return c
		}
		return cmp.Compare(a.JID+a.Batch, b.JID+b.Batch)
	})
	slices.SortFunc(dead, func(a, b *Member) int {
		// Newest death first; those no longer in the dead set last.
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		return cmp.Compare(a.JID+a.Batch, b.JID+b.Batch)
	})
	nPending, nDead = len(pending), len(dead)
	if limit > 0 {
		pending = pending[:min(limit, len(pending))]
		dead = dead[:min(limit, len(dead))]
	}
	return pending, dead, nPending, nDead, nil
}

// setRank orders pending members: waiting for a retry, scheduled, others.
func setRank(set string) int {
	switch set {
	case contract.KeyRetry:
		return 0
	case contract.KeySchedule:
		return 1
	}
	return 2
}

// fill sets what the entry of set key tells about the member's job.
func (m *Member) fill(key string, f contract.SetMember) {
	m.Set, m.Score = key, f.Score
	at := contract.FromEpochSeconds(f.Score)
	m.At = &at
	job, err := wire.ParseJob(f.Value)
	if err != nil {
		return
	}
	m.Class, m.Queue = job.Class(), job.Queue()
	m.ErrorClass, m.ErrorMessage = job.ErrorClass(), job.ErrorMessage()
	if n, ok := job.RetryCount(); ok {
		m.RetryCount = &n
	}
	if t, ok := job.Time("failed_at"); ok {
		m.FailedAt = &t
	}
}
