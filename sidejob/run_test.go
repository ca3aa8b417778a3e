package sidejob

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/rubytest"
	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"
)

// queueEntries are Sidekiq items around the job's own in a long queue, for
// the duplicate check: wantFound tells whether Sidekiq::Queue#find_job(id)
// (and so the gem's run) sees the job as already queued.
var queueEntries = []struct {
	name      string
	item      func(id int64) string
	wantFound bool
}{
	{"integer jid", func(id int64) string {
		return fmt.Sprintf(`{"retry":false,"queue":"testq","class":"TestWorker","args":[],"jid":%d}`, id)
	}, true},
	{"integral float jid", func(id int64) string {
		return fmt.Sprintf(`{"retry":false,"queue":"testq","class":"TestWorker","args":[],"jid":%d.0}`, id)
	}, true},
	{"longer jid with the same prefix", func(id int64) string {
		return fmt.Sprintf(`{"retry":false,"queue":"testq","class":"TestWorker","args":[],"jid":%d5}`, id)
	}, false},
	{"jid only inside args", func(id int64) string {
		return fmt.Sprintf(`{"retry":false,"queue":"testq","class":"TestWorker","args":[{"jid":%d}],"jid":"abc"}`, id)
	}, false},
	{"non-integral float jid", func(id int64) string {
		return fmt.Sprintf(`{"retry":false,"queue":"testq","class":"TestWorker","args":[],"jid":%d.5}`, id)
	}, false},
}

// fillQueue writes n filler items to queue:testq with entry at index pos
// (counted from the head, where LPUSH adds); pos < 0 leaves it out.
func (b *testBundle) fillQueue(t *testing.T, n, pos int, entry string) {
	t.Helper()
	b.do(t, "DEL", "queue:testq")
	args := []any{"queue:testq"}
	for i := range n {
		if i == pos {
			args = append(args, entry)
			continue
		}
		args = append(args, fmt.Sprintf(`{"retry":false,"queue":"testq","class":"TestWorker","args":[],"jid":"%024x"}`, i))
	}
	b.do(t, "RPUSH", args...)
}

// cmdCalls returns the number of calls of a command since the last CONFIG
// RESETSTAT (commands run by scripts are counted too).
func (b *testBundle) cmdCalls(t *testing.T, name string) int {
	t.Helper()
	info, err := redis.String(b.do(t, "INFO", "commandstats"), nil)
	require.NoError(t, err)
	m := regexp.MustCompile(`cmdstat_` + name + `:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// The duplicate check of run scans queue:<q> client-side in pages (as
// Sidekiq::Queue#find_job does), not in one Lua call that blocks Redis for
// the whole list, and still finds the item anywhere in a long queue.
func TestDuplicateRunCheckIsPaged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	j := b.queue(t, "TestWorker", nil)
	n := 2*queuePageSize + queuePageSize/2
	item := queueEntries[0].item(j.ID())
	for _, pos := range []int{0, queuePageSize - 1, queuePageSize, n - 1} {
		b.fillQueue(t, n, pos, item)
		got, err := j.Run(ctx, nil)
		require.NoError(t, err)
		require.True(t, j.equal(got))
		require.Equal(t, n, b.enqueued(t), "found at index %d: no second push", pos)
	}

	// unlike Ruby, a jid written as a JSON string of the same digits counts
	b.fillQueue(t, n, n-1, fmt.Sprintf(`{"retry":false,"queue":"testq","class":"TestWorker","args":[],"jid":"%d"}`, j.ID()))
	_, err := j.Run(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, n, b.enqueued(t), "string jid found")

	b.fillQueue(t, n, -1, "")
	b.do(t, "CONFIG", "RESETSTAT")
	_, err = j.Run(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, n+1, b.enqueued(t), "not queued yet: pushed")
	require.Equal(t, 3, b.cmdCalls(t, "lrange"), "three pages of %d, not one LRANGE 0 -1", queuePageSize)
}

// The Go duplicate check agrees with Ruby's Sidekiq::Queue#find_job (6.4.1,
// pages of 50) on a queue longer than a page, entry by entry.
func TestDuplicateRunCheckMatchesRuby(t *testing.T) {
	rubytest.Require(t)
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := srv.Pool(t)
	c, err := NewClient(&Config{Pool: pool})
	require.NoError(t, err)
	b := &testBundle{srv: srv, pool: pool, c: c}
	const id = 7
	var script strings.Builder
	for i, e := range queueEntries {
		key := fmt.Sprintf("queue:case%d", i)
		b.do(t, "DEL", key)
		for k := range 120 {
			entry := `{"jid":"filler","class":"X"}`
			if k == 70 {
				entry = e.item(id)
			}
			b.do(t, "RPUSH", key, entry)
		}
		found, err := c.job(id).waitingInQueue(ctx, fmt.Sprintf("case%d", i))
		require.NoError(t, err)
		require.Equal(t, e.wantFound, found, e.name)
		fmt.Fprintf(&script, "puts Sidekiq::Queue.new('case%d').find_job(%d).nil? ? 'no' : 'yes'\n", i, id)
	}
	out := strings.Fields(rubytest.Run(t, srv.URL(), script.String()))
	require.Len(t, out, len(queueEntries))
	for i, e := range queueEntries {
		require.Equal(t, map[bool]string{true: "yes", false: "no"}[e.wantFound], out[i], "Ruby: %s", e.name)
	}
}
