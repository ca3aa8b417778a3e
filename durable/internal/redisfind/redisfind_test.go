package redisfind

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
)

// member is a set member whose jid is jid.
func member(jid string) string {
	return fmt.Sprintf(`{"class":"C","args":[],"jid":"%s","queue":"default"}`, jid)
}

// fill adds members to key: before members a millisecond apart from t0,
// then tied members all at one score, then after members a millisecond
// apart; it returns the jids in the set's order and their scores.
func fill(t testing.TB, conn redis.Conn, key string, t0 time.Time, before, tied, after int) ([]string, map[string]float64) {
	t.Helper()
	var jids []string
	scores := map[string]float64{}
	at := t0
	add := func(n int, step time.Duration) {
		args := []any{key}
		for range n {
			jid := fmt.Sprintf("%024d", len(jids))
			jids = append(jids, jid)
			sc := contract.EpochSeconds(at)
			scores[jid] = sc
			args = append(args, contract.Score(at), member(jid))
			at = at.Add(step)
		}
		if len(args) > 1 {
			_, err := conn.Do("ZADD", args...)
			require.NoError(t, err)
		}
	}
	add(before, time.Millisecond)
	add(tied, 0)
	at = at.Add(time.Millisecond)
	add(after, time.Millisecond)
	return jids, scores
}

// A window read in pages finds every wanted member, those in a run of
// equal scores longer than a page included (ZADD orders them by member,
// as the jids here are), and reads each member once.
func TestInWindowsPagesThroughTiedScores(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	conn, err := rs.Dial()
	require.NoError(t, err)
	defer conn.Close()
	t0 := time.Unix(1795296573, 0)
	// 300 members, then 1,200 at one score (across three pages), then 450.
	jids, scores := fill(t, conn, "retry", t0, 300, 1200, 450)
	require.Len(t, jids, 1950)
	last := t0.Add(2 * time.Second)
	// Wanted: members at the page edges and inside the tied run, the last
	// member, and one that is not in the set (so the window is read to
	// its end).
	picks := []int{0, 299, 300, 499, 500, 501, 999, 1000, 1250, 1499, 1500, 1949}
	want := map[string]bool{"absent000000000000000000": true}
	var wins []Window
	for _, i := range picks {
		want[jids[i]] = true
		wins = append(wins, Window{Lo: t0, Hi: last, JID: jids[i]})
	}
	wins = append(wins, Window{Lo: t0, Hi: last, JID: "absent000000000000000000"})
	before := redistest.CommandCalls(t, conn, "zrangebyscore")
	found, err := InWindows(context.Background(), conn, "retry", wins, want)
	require.NoError(t, err)
	require.Len(t, found, len(picks))
	for _, i := range picks {
		m, ok := found[jids[i]]
		require.True(t, ok, "member %d found", i)
		require.Equal(t, member(jids[i]), string(m.Value))
		require.InDelta(t, scores[jids[i]], m.Score, 1e-6, "member %d's score", i)
	}
	// 1,950 members in pages of 500: four reads, no member read twice.
	require.Equal(t, 4, redistest.CommandCalls(t, conn, "zrangebyscore")-before)
}

// BenchmarkInWindowsWideWindow reads one window of 200,000 members to its
// end (the wanted jid is absent), as a pass does for a row whose job is
// gone when its window holds a burst of retries.
func BenchmarkInWindowsWideWindow(b *testing.B) {
	rs := redistest.Start(b)
	conn, err := rs.Dial()
	require.NoError(b, err)
	defer conn.Close()
	t0 := time.Unix(1795296573, 0)
	const n = 200_000
	for i := 0; i < n; i += 10_000 {
		fillFrom(b, conn, "retry", t0, i, 10_000)
	}
	want := map[string]bool{"absent000000000000000000": true}
	wins := []Window{{Lo: t0, Hi: t0.Add(n * time.Millisecond), JID: "absent000000000000000000"}}
	for b.Loop() {
		found, err := InWindows(context.Background(), conn, "retry", wins, want)
		require.NoError(b, err)
		require.Empty(b, found)
	}
}

// fillFrom adds n members a millisecond apart, the first one i
// milliseconds after t0.
func fillFrom(b *testing.B, conn redis.Conn, key string, t0 time.Time, i, n int) {
	args := []any{key}
	for k := i; k < i+n; k++ {
		args = append(args, contract.Score(t0.Add(time.Duration(k)*time.Millisecond)), member(fmt.Sprintf("%024d", k)))
	}
	_, err := conn.Do("ZADD", args...)
	require.NoError(b, err)
}
