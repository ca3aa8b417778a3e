package sidekiq

import (
	"context"
	"errors"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/wire"
)

// A failure that writes a retry or a dead entry marks its jid as gojob's,
// and the version decision then reads nothing from those entries: a lone
// gojob's own 7.x entries do not pin it to 7.3.10.
func TestOwnRetryAndDeadEntriesAreNotEvidence(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{})
	b.srv.Handle("FailJob", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		return WithErrorClass("ArgumentError", errors.New("boom"))
	}), nil)
	b.start(t)
	b.push(t, "default", `{"retry":2,"queue":"default","backtrace":true,"args":[1],"class":"FailJob","jid":"0e0000000000000000000001","created_at":1795296573.1,"enqueued_at":1795296573.1}`)
	b.push(t, "default", `{"retry":0,"queue":"default","backtrace":true,"args":[2],"class":"FailJob","jid":"0e0000000000000000000002","created_at":1795296573.1,"enqueued_at":1795296573.1}`)
	wait.For(t, "a retry and a dead entry", func() bool {
		return zcard(t, b.conn, contract.KeyRetry) == 1 && zcard(t, b.conn, contract.KeyDead) == 1
	})
	wait.For(t, "both marked", func() bool { return zcard(t, b.conn, contract.KeyGojobEntries) == 2 })
	jids, err := redis.Strings(b.conn.Do("ZRANGE", contract.KeyGojobEntries, 0, -1))
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"0e0000000000000000000001", "0e0000000000000000000002"}, jids)

	_, err = b.conn.Do("DEL", contract.KeyRecordedFormat, contract.KeyProcesses) // a lone gojob, no record
	require.NoError(t, err)
	d, err := contract.DecideFormat(context.Background(), b.pool, b.srv.cfg.Clock.Now())
	require.NoError(t, err)
	require.Empty(t, d.Evidence)
	require.Equal(t, contract.FormatForAll, d.Format)
}
