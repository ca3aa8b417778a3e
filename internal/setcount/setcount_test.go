package setcount_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/setcount"
)

// ByQueue counts by the payload's top-level queue, whatever the name
// holds, and decodes here what the script leaves: nested "queue" keys
// before the top-level one, escapes, payloads that are not jobs.
func TestByQueueCountsTopLevelQueue(t *testing.T) {
	t.Parallel()
	pool := redistest.Start(t).Pool(t)
	conn := pool.Get()
	defer conn.Close()
	members := []string{
		`{"retry":true,"queue":"mail","args":[{"queue":"other"}],"class":"A","jid":"1"}`,
		`{"retry":true,"queue":"mail","args":[],"class":"A","jid":"2"}`,
		`{"class":"A","args":[{"queue":"nested"}],"queue":"late","jid":"3"}`,
		`{"retry":true,"queue":"q\"uote","args":[],"class":"A","jid":"4"}`,
		`{"retry":true,"queue":"\u00fcn","args":[],"class":"A","jid":"5"}`,
		`{"retry":true,"queue":"ün","args":[],"class":"A","jid":"6"}`,
		`{"retry":true,"queue":"a/b c","args":[],"class":"A","jid":"7"}`,
		`{"retry":true,"class":"A","args":[],"jid":"8"}`,
		`not json {"queue":"fake"`,
	}
	for i, m := range members {
		_, err := conn.Do("ZADD", "retry", 1000+i, m)
		require.NoError(t, err)
	}
	for i := range 2500 { // more than one page
		_, err := conn.Do("ZADD", "retry", 2000+i, fmt.Sprintf(`{"retry":true,"queue":"bulk","args":[%d],"class":"A","jid":"b%d"}`, i, i))
		require.NoError(t, err)
	}
	counts, err := setcount.ByQueue(context.Background(), pool, "retry")
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"mail": 2, "late": 1, `q"uote`: 1, "ün": 2, "a/b c": 1, "": 2, "bulk": 2500}, counts)
}
