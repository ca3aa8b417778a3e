package api_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/api"
)

const (
	apiInfo64 = `{"hostname":"vm","started_at":1795296576.251191,"pid":14670,"tag":"mytag","concurrency":3,"queues":["default","critical"],"labels":["l1"],"identity":"vm:14670:c2a2a23ead83"}`
	apiInfo81 = `{"hostname":"vm2","started_at":1795296577.5,"pid":99,"tag":"","queues":["default"],"weights":[{"default":0}],"labels":[],"identity":"vm2:99:aaaaaaaaaaaa","version":"8.1.7","embedded":true}`
)

func apiAddProcesses(t *testing.T, b *apiBundle) {
	t.Helper()
	b.do(t, "SADD", "processes", "vm:14670:c2a2a23ead83", "vm2:99:aaaaaaaaaaaa", "gone:1:bbbbbbbbbbbb")
	b.do(t, "HSET", "vm:14670:c2a2a23ead83", "info", apiInfo64, "busy", "2", "beat", "1795296570.25", "rtt_us", "153", "quiet", "false", "rss", "41234")
	b.do(t, "HSET", "vm2:99:aaaaaaaaaaaa", "info", apiInfo81, "concurrency", "7", "busy", "1", "beat", "1795296571.5", "rtt_us", "99", "quiet", "true", "rss", "1000")
	// gone:1:… has no hash: its heartbeat expired.
	b.do(t, "HSET", "gone:1:bbbbbbbbbbbb:workers", "zzz", `{"queue":"default","payload":"{}","run_at":1}`)
}

func TestAPIProcesses(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	apiAddProcesses(t, b)

	st, err := b.api.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3, st.Processes) // SCARD, before the cleanup

	list, err := b.api.Processes(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)

	// Sorted by identity: "vm2:…" < "vm:…".
	p := list[1]
	require.Equal(t, "vm:14670:c2a2a23ead83", p.Identity)
	require.Equal(t, "vm", p.Hostname)
	require.EqualValues(t, 14670, p.PID)
	require.Equal(t, "mytag", p.Tag)
	require.Equal(t, []string{"l1"}, p.Labels)
	require.Equal(t, []string{"default", "critical"}, p.Queues)
	require.EqualValues(t, 3, p.Concurrency)
	require.EqualValues(t, 2, p.Busy)
	require.Equal(t, time.Unix(1795296570, 250000000), p.Beat)
	require.WithinDuration(t, time.Unix(1795296576, 251191000), p.StartedAt, time.Microsecond)
	require.EqualValues(t, 153, p.RTTMicros)
	require.EqualValues(t, 41234, p.RSS)
	require.False(t, p.Stopping)
	require.False(t, p.Embedded)
	// Ruby's hash.merge: info keys first, the heartbeat fields after.
	require.Equal(t, `{"hostname":"vm","started_at":1795296576.251191,"pid":14670,"tag":"mytag","concurrency":3,"queues":["default","critical"],"labels":["l1"],"identity":"vm:14670:c2a2a23ead83","busy":2,"beat":1795296570.25,"quiet":"false","rss":41234,"rtt_us":153}`,
		string(p.Attributes.Encode()))

	p2 := list[0]
	require.EqualValues(t, 7, p2.Concurrency) // the 8.1.2+ hash field
	require.True(t, p2.Stopping)
	require.True(t, p2.Embedded)

	// The stale id was cleaned up under the lock.
	require.Equal(t, []string{"vm2:99:aaaaaaaaaaaa", "vm:14670:c2a2a23ead83"}, slices.Sorted(slices.Values(b.strings(t, "SMEMBERS", "processes"))))
	require.Equal(t, "1", string(b.do(t, "GET", "process_cleanup").([]byte)))
	ttl := b.int(t, "TTL", "process_cleanup")
	require.True(t, ttl > 0 && ttl <= 60, "ttl %d", ttl)

	// While the lock is held, cleanup does not run.
	b.do(t, "SADD", "processes", "gone:2:cccccccccccc")
	res, err := api.CleanupProcesses(ctx, b.api)
	require.NoError(t, err)
	require.Equal(t, &contract.CleanupResult{}, res)
	list, err = b.api.Processes(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	b.do(t, "DEL", "process_cleanup")
	res, err = api.CleanupProcesses(ctx, b.api)
	require.NoError(t, err)
	require.Equal(t, &contract.CleanupResult{Ran: true, Removed: 1}, res)

	leader, err := b.api.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "", leader)
	b.do(t, "SET", "dear-leader", "vm:14670:c2a2a23ead83")
	leader, err = b.api.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "vm:14670:c2a2a23ead83", leader)
}

func TestAPIProcessSignals(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	apiAddProcesses(t, b)
	list, err := b.api.Processes(ctx)
	require.NoError(t, err)
	p := list[1]
	require.NoError(t, p.Quiet(ctx))
	require.NoError(t, p.DumpThreads(ctx))
	require.NoError(t, p.Stop(ctx))
	key := "vm:14670:c2a2a23ead83-signals"
	// LPUSH: the process RPOPs the oldest first.
	require.Equal(t, []string{"TERM", "TTIN", "TSTP"}, b.strings(t, "LRANGE", key, 0, -1))
	ttl := b.int(t, "TTL", key)
	require.True(t, ttl > 0 && ttl <= 60, "ttl %d", ttl)

	embedded := list[0]
	require.ErrorContains(t, embedded.Quiet(ctx), "embedded")
	require.ErrorContains(t, embedded.Stop(ctx), "embedded")
	require.NoError(t, embedded.DumpThreads(ctx))
	require.Equal(t, []string{"TTIN"}, b.strings(t, "LRANGE", "vm2:99:aaaaaaaaaaaa-signals", 0, -1))

	require.NoError(t, api.SignalProcess(ctx, b.api, "x:1:y", "TSTP"))
	require.Equal(t, []string{"TSTP"}, b.strings(t, "LRANGE", "x:1:y-signals", 0, -1))
}

func TestAPIProcessBadInfo(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	b.do(t, "SADD", "processes", "p:1:x")
	b.do(t, "HSET", "p:1:x", "info", "{bad")
	_, err := b.api.Processes(context.Background())
	require.ErrorContains(t, err, "process p:1:x")
}

func TestAPIWorkSet(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	apiAddProcesses(t, b)
	job1 := `{"retry":true,"queue":"default","class":"A","args":[1],"jid":"w1","created_at":1795296500.5,"enqueued_at":1795296500.75}`
	// 6.4.1 writes <id>:workers with the payload as a JSON string.
	b.do(t, "HSET", "vm:14670:c2a2a23ead83:workers",
		"bvu", `{"queue":"default","payload":`+string(apiJSONString(job1))+`,"run_at":1795296560}`,
		"glr", `{"queue":"critical","payload":{"class":"B","args":[],"jid":"w2"},"run_at":1795296550}`)
	// 6.4.2+ writes <id>:work.
	b.do(t, "HSET", "vm2:99:aaaaaaaaaaaa:work", "abc", `{"queue":"default","payload":"{\"class\":\"C\",\"jid\":\"w3\"}","run_at":1795296555}`)

	work, err := b.api.WorkSet(ctx)
	require.NoError(t, err)
	require.Len(t, work, 3) // the process without a hash is skipped
	require.Equal(t, "w2", work[0].Payload.JID())
	require.Equal(t, "glr", work[0].TID)
	require.Equal(t, "critical", work[0].Queue)
	require.Equal(t, `{"class":"B","args":[],"jid":"w2"}`, string(work[0].PayloadRaw))
	require.Equal(t, "w3", work[1].Payload.JID())
	require.Equal(t, "vm2:99:aaaaaaaaaaaa", work[1].Identity)
	require.Equal(t, time.Unix(1795296555, 0), work[1].RunAt)
	require.Equal(t, job1, string(work[2].PayloadRaw))
	require.Equal(t, job1, string(work[2].Payload.Bytes()))
	require.Equal(t, "vm:14670:c2a2a23ead83", work[2].Identity)

	st, err := b.api.Stats(ctx) // the busy fields, Ruby's WorkSet#size
	require.NoError(t, err)
	require.EqualValues(t, 3, st.Busy)
}

// apiJSONString encodes s as a JSON string, as Ruby nests the payload.
func apiJSONString(s string) []byte {
	out := []byte{'"'}
	for _, c := range []byte(s) {
		if c == '"' || c == '\\' {
			out = append(out, '\\')
		}
		out = append(out, c)
	}
	return append(out, '"')
}

// A malformed work entry is listed with its error instead of failing the
// whole work set (the durable reconciler reads it on every pass).
func TestAPIWorkSetMalformedEntry(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	apiAddProcesses(t, b)
	b.do(t, "HSET", "vm:14670:c2a2a23ead83:workers",
		"ok1", `{"queue":"default","payload":"{\"class\":\"A\",\"jid\":\"w1\"}","run_at":1795296560}`,
		"bad", `{"queue":`)
	work, err := b.api.WorkSet(context.Background())
	require.NoError(t, err)
	require.Len(t, work, 2)
	var bad, good int
	for _, w := range work {
		if w.ParseErr != nil {
			bad++
			require.Equal(t, `{"queue":`, string(w.PayloadRaw))
		} else {
			good++
			require.Equal(t, "w1", w.Payload.JID())
		}
	}
	require.Equal(t, 1, bad)
	require.Equal(t, 1, good)
}
