package sidekiq

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/wire"
	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"
)

// The heartbeat registers the process as Ruby does (busy, quiet,
// concurrency, rss, info, the work hash, a 60 s TTL) and hands the signals
// the Web UI leaves in <identity>-signals to the server: TSTP quiets, TERM
// asks for a stop.
func TestHeartbeatRegistersProcessAndDeliversSignals(t *testing.T) {
	t.Parallel()
	for _, v := range []wire.Version{wire.Version6, wire.Version7, wire.Version8} {
		t.Run(v.String(), func(t *testing.T) {
			b := newTestServer(t, ServerConfig{Version: v, Concurrency: 3, Tag: "mytag", Queues: []wire.QueueWeight{{Name: "default", Weight: 2}, {Name: "slow", Weight: 1}}})
			block := make(chan struct{})
			running := make(chan struct{})
			b.srv.Handle("Slow", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
				close(running)
				<-block
				return nil
			}), nil)
			b.start(t)
			b.push(t, "slow", `{"retry":true,"queue":"slow","class":"Slow","args":[],"jid":"s1"}`)
			<-running
			b.beat(t)
			id := b.srv.Identity()
			h, err := redis.StringMap(b.conn.Do("HGETALL", id))
			require.NoError(t, err)
			require.Equal(t, "1", h["busy"])
			require.Equal(t, "false", h["quiet"])
			require.NotEmpty(t, h["rss"])
			// Ruby's field set: concurrency is a hash field only from 8.1.2.
			fields := []string{"info", "busy", "beat", "rtt_us", "quiet", "rss"}
			if v.AtLeast(8, 1, 2) {
				fields = append(fields, "concurrency")
				require.Equal(t, "3", h["concurrency"])
			}
			require.ElementsMatch(t, fields, slices.Collect(maps.Keys(h)))
			info, err := wire.ParseJob([]byte(h["info"]))
			require.NoError(t, err)
			if v.Major == 6 {
				require.Equal(t, []string{"hostname", "started_at", "pid", "tag", "concurrency", "queues", "labels", "identity"}, info.Map().Keys())
			} else {
				require.Contains(t, info.Map().Keys(), "version")
			}
			work, err := redis.StringMap(b.conn.Do("HGETALL", contract.WorkKey(id, v)))
			require.NoError(t, err)
			require.Len(t, work, 1)
			for _, w := range work {
				require.Contains(t, w, `"queue":"slow","payload":"{\"retry\":true`)
			}
			ttl, _ := redis.Int(b.conn.Do("TTL", id))
			require.InDelta(t, 60, ttl, 1)

			_, err = b.conn.Do("LPUSH", contract.SignalsKey(id), "TSTP")
			require.NoError(t, err)
			b.beat(t)
			require.True(t, b.srv.isQuiet())
			b.beat(t)
			q, _ := redis.String(b.conn.Do("HGET", id, "quiet"))
			require.Equal(t, "true", q)
			_, err = b.conn.Do("LPUSH", contract.SignalsKey(id), "TERM")
			require.NoError(t, err)
			b.beat(t)
			select {
			case <-b.srv.life.stopCh:
			default:
				t.Fatal("TERM did not request a stop")
			}
			close(block)
		})
	}
}
