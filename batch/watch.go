package batch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/lease"
	"github.com/gojob/gojob/sidekiq/wire"
)

// The dead-set watch. A batch job's death is recorded by its death
// handler, but some deaths are never handled: a process killed between the
// job's move to the dead set and the handler, a Kill from Ruby's Web UI or
// from a process without the batches. Such a job would leave its batch
// pending, and the complete callback unpushed, for good. So every
// watchEvery one process of the cluster reads the dead-set entries scored
// since the last read (a sorted set's score is the time of death, epoch
// seconds, in every Sidekiq version) and records those of gojob batches as
// dead; recording a death twice changes nothing (lua/update.lua).

const (
	// watchEvery is how often a process looks at the dead set (jittered).
	watchEvery = 30 * time.Second
	// watchOverlap is how far back of the last read a read starts: an
	// entry added by a process whose clock is behind is still seen.
	watchOverlap = 5 * time.Minute
	// watchPage is how many entries a read takes at a time.
	watchPage = 500
)

// Watch records, until ctx ends, the deaths of batch jobs that no death
// handler saw (see watch.go). Every gojob work process with batches runs
// it; a lease makes one of them read at a time.
func (b *Batches) Watch(ctx context.Context) {
	for {
		d := watchEvery/2 + rand.N(watchEvery)
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		if _, err := b.watchPass(ctx, d); err != nil && ctx.Err() == nil {
			b.cfg.Logger.Warn().Str("component", "batch").Err(err).Msg("dead-set watch failed; trying again at the next pass")
		}
	}
}

// watchPass reads the dead set once if no other process holds the lease
// (taken for lease), and returns how many batch jobs it found there (each
// recorded as dead; most were already).
func (b *Batches) watchPass(ctx context.Context, ttl time.Duration) (int, error) {
	conn, err := b.cfg.Client.Pool().GetContext(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	took, err := lease.Take(ctx, conn, contract.KeyBatchDeadWatch, "1", ttl)
	if err != nil {
		return 0, err
	}
	if !took {
		return 0, nil // another process reads now
	}
	from := "-inf"
	if seen, err := redis.Float64(redis.DoContext(conn, ctx, "GET", contract.KeyBatchDeadSeen)); err == nil {
		from = strconv.FormatFloat(seen-watchOverlap.Seconds(), 'f', -1, 64)
	} else if err != redis.ErrNil {
		return 0, err
	}
	now := contract.EpochSeconds(b.cfg.Client.Clock().Now())
	recorded := 0
	for offset := 0; ; offset += watchPage {
		entries, err := redis.ByteSlices(redis.DoContext(conn, ctx, "ZRANGEBYSCORE", contract.KeyDead, from, "+inf", "LIMIT", offset, watchPage))
		if err != nil {
			return recorded, err
		}
		for _, raw := range entries {
			if !bytes.Contains(raw, []byte(`"`+payloadKey+`"`)) {
				continue
			}
			job, err := wire.ParseJob(raw)
			if err != nil {
				continue
			}
			bid, ok := stringField(job, payloadKey)
			if !ok {
				continue
			}
			pushed, err := b.update(ctx, "dead", bid, job.JID())
			if err != nil && !errors.Is(err, ErrNotFound) {
				return recorded, fmt.Errorf("batch: record the death of %s in %s: %w", job.JID(), bid, err)
			}
			recorded++
			b.logPushed(pushed)
		}
		if len(entries) < watchPage {
			break
		}
	}
	_, err = redis.DoContext(conn, ctx, "SET", contract.KeyBatchDeadSeen, strconv.FormatFloat(now, 'f', 3, 64))
	return recorded, err
}
