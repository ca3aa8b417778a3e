package sidekiq

import (
	"context"
	"time"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redisreply"
)

// markOwnEntry lists jid in contract.KeyGojobEntries after a failure wrote
// its retry or dead entry, so that the version decision never takes
// gojob's own entries for what a Ruby process left
// (docs/version-follow.md). Best effort: when the mark is lost, the entry
// may count as evidence, nothing else.
func (p *processor) markOwnEntry(jid string, now time.Time) {
	if p.cfg.Pool == nil || jid == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := p.cfg.Pool.GetContext(ctx)
	if err != nil {
		return
	}
	defer conn.Close()
	conn.Send("ZADD", contract.KeyGojobEntries, contract.Score(now), jid)
	conn.Send("ZREMRANGEBYRANK", contract.KeyGojobEntries, 0, -(contract.GojobEntriesKept + 1))
	if _, err := redisreply.Pipeline(ctx, conn); err != nil {
		p.log.Debug().Err(err).Str("component", "version").Str("jid", jid).Msg("could not mark the entry as gojob's")
	}
}
