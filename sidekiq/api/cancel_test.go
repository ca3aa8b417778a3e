package api_test

import (
	"context"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/wire"
)

// iterableCapture holds files of a capture of Ruby Sidekiq 8.1.7's
// iterable jobs, verbatim; its README.md says how they were made.
const iterableCapture = "../../testdata/sidekiq-8.1.7-iterable/"

// A cancel of a job that is in no queue or set (running in a Ruby process,
// say) cancels it as Sidekiq 8.1.7's Client#cancel! does: it-<jid> holds
// "cancelled" with the epoch seconds, expiring in 30 days
// (it-after-cancel.txt, with the cancel's time); a second cancel keeps the
// first time; the expiry is set only when the key has none, so a running
// iterable job's state keeps its own.
func TestCancelSetsTheIterationCancelAsSidekiq8(t *testing.T) {
	t.Parallel()
	capture, err := os.ReadFile(iterableCapture + "it-after-cancel.txt")
	require.NoError(t, err)
	// The capture: cancel! returned the time, then the key's dump.
	m := regexp.MustCompile(`(?m)^# it-(\w+) type=hash ttl=(\d+) .*\n(cancelled)\t(\d+)$`).FindSubmatch(capture)
	require.NotNil(t, m, "the capture's it-<jid> dump")
	jid, field, stamp := string(m[1]), string(m[3]), string(m[4])
	require.Equal(t, "2592000", string(m[2]))

	b := apiSetup(t, func(c *api.Config) { c.Version = wire.Version8 })
	ctx := context.Background()
	b.clk.Set(time.Unix(1795886882, 926755000)) // the capture's cancel!
	_, err = b.api.Cancel(ctx, jid)
	require.ErrorIs(t, err, api.ErrJobNotFound, "in no queue, set or work hash; recorded anyway")
	key := "it-" + jid
	require.Equal(t, []string{field, stamp}, b.strings(t, "HGETALL", key))
	require.Equal(t, int64(2592000), b.int(t, "TTL", key))
	require.Equal(t, int64(1), b.int(t, "EXISTS", "gojob-cancel:"+jid), "and gojob's own request")

	b.do(t, "EXPIRE", key, 100) // the state's own expiry
	b.clk.Set(time.Unix(1795886999, 0))
	_, err = b.api.Cancel(ctx, jid)
	require.ErrorIs(t, err, api.ErrJobNotFound)
	require.Equal(t, []string{field, stamp}, b.strings(t, "HGETALL", key), "the first cancel's time stays")
	require.LessOrEqual(t, b.int(t, "TTL", key), int64(100), "EXPIRE … NX: an expiry is kept")
}

// Beside Sidekiq 7.3 (lib/sidekiq/client.rb 7.3.10: EXPIRE without NX),
// each cancel sets the 30-day expiry again.
func TestCancelRefreshesTheIterationExpiryAsSidekiq7(t *testing.T) {
	t.Parallel()
	b := apiSetup(t, func(c *api.Config) { c.Version = wire.Version7 })
	ctx := context.Background()
	jid := contract.NewJID()
	key := "it-" + jid
	b.do(t, "HSET", key, "ex", "1", "c", "25", "rt", "0")
	b.do(t, "EXPIRE", key, 100)
	_, err := b.api.Cancel(ctx, jid)
	require.ErrorIs(t, err, api.ErrJobNotFound)
	require.Equal(t, []string{"ex", "1", "c", "25", "rt", "0", "cancelled", "1795296573"}, b.strings(t, "HGETALL", key))
	require.Equal(t, int64(2592000), b.int(t, "TTL", key))
}

// A job removed from its queue is cancelled for good: no request is left
// behind, in gojob's key or in it-<jid>.
func TestCancelOfAQueuedJobLeavesNoRequest(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	res, err := b.api.Client().Enqueue(ctx, "default", "X")
	require.NoError(t, err)
	got, err := b.api.Cancel(ctx, res.JID)
	require.NoError(t, err)
	require.Equal(t, "queue", got.Where)
	require.Equal(t, "default", got.Queue)
	require.Zero(t, b.int(t, "EXISTS", "it-"+res.JID, "gojob-cancel:"+res.JID))
}
