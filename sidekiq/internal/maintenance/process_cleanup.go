package maintenance

import (
	"context"
	"errors"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
)

// ProcessCleanerConfig configures a ProcessCleaner.
type ProcessCleanerConfig struct {
	// Pool is the Redis pool. Required.
	Pool *redis.Pool
	// Format decides when and how dead processes are pruned. Required.
	Format *contract.LiveFormat
	// Logger receives cleanup failures.
	Logger zerolog.Logger
}

// ProcessCleaner removes processes that died without a goodbye from the
// processes set, when and how the poller of the target version does it
// (lib/sidekiq/scheduled.rb and api.rb):
//
//   - 6.5.7+: once, at the end of the poller's initial wait, under the
//     cluster-wide process_cleanup lock (runOnce);
//   - before 6.5: no lock, at the first and every tenth process count the
//     poller takes for its interval (count).
//
// It has no loop of its own: Ruby runs it from the poller, and so does
// gojob, so that a mixed cluster prunes at the same moments.
type ProcessCleaner struct {
	cfg   ProcessCleanerConfig
	calls int // 6.4's @count_calls
}

// NewProcessCleaner returns a cleaner.
func NewProcessCleaner(cfg *ProcessCleanerConfig) (*ProcessCleaner, error) {
	if cfg == nil || cfg.Pool == nil || cfg.Format == nil {
		return nil, errors.New("sidekiq: ProcessCleanerConfig needs Pool and Format")
	}
	return &ProcessCleaner{cfg: *cfg}, nil
}

// runOnce is the 6.5.7+ startup cleanup; before 6.5.7 it does nothing (the
// pruning happens in count).
func (p *ProcessCleaner) runOnce(ctx context.Context) (*contract.CleanupResult, error) {
	if !p.cfg.Format.Version().AtLeast(6, 5, 7) {
		return &contract.CleanupResult{}, nil
	}
	conn, err := p.cfg.Pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return contract.CleanupProcesses(ctx, conn, contract.CleanupParams{Lock: true})
}

// startup runs runOnce and logs a failure that is not an outage.
func (p *ProcessCleaner) startup(ctx context.Context) {
	if _, err := p.runOnce(ctx); err != nil && !redisx.IsConnError(err) {
		p.cfg.Logger.Warn().Err(err).Str("component", "poller").Msg("process cleanup failed")
	}
}

// count is Poller#process_count: SCARD processes. Before 6.5 it is
// `ProcessSet.new(@count_calls % 10 == 0).size`: the first call and every
// tenth after it prune dead processes first, with no lock (6.4 has no
// process_cleanup key).
func (p *ProcessCleaner) count(ctx context.Context) (int, error) {
	conn, err := p.cfg.Pool.GetContext(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	legacy := !p.cfg.Format.Version().AtLeast(6, 5, 0)
	if legacy && p.calls%10 == 0 {
		if _, err := contract.CleanupProcesses(ctx, conn, contract.CleanupParams{}); err != nil {
			return 0, err
		}
	}
	n, err := redis.Int(conn.Do("SCARD", contract.KeyProcesses))
	if err == nil && legacy {
		p.calls++
	}
	return n, err
}
