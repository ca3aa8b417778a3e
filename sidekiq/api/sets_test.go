package api_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// apiFillSet ZADDs n retry payloads r000… with scores 1795300000+i.
func apiFillSet(t *testing.T, b *apiBundle, set string, n int) {
	t.Helper()
	args := []any{set}
	for i := range n {
		args = append(args, 1795300000+i, apiPayload(fmt.Sprintf("r%03d", i), `,"retry_count":2`))
	}
	b.do(t, "ZADD", args...)
}

func apiJIDs(entries []*api.SortedEntry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.JID()
	}
	return out
}

// apiQueueJIDs returns the jids of a queue, newest first.
func apiQueueJIDs(t *testing.T, b *apiBundle, queue string) []string {
	t.Helper()
	var out []string
	for _, s := range b.strings(t, "LRANGE", "queue:"+queue, 0, -1) {
		j, err := wire.ParseJob([]byte(s))
		require.NoError(t, err)
		out = append(out, j.JID())
	}
	return out
}

func TestAPISetPageAndEachOrder(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	apiFillSet(t, b, "retry", 120)
	// Ties: Redis orders equal scores by member, JobSet#each reverses that.
	b.do(t, "ZADD", "retry", 1795300050, apiPayload("tieA", ""), 1795300050, apiPayload("tieB", ""))
	// The dead set holds the same members: it pages in JobSet#each order.
	b.do(t, "ZUNIONSTORE", "dead", 1, "retry")
	rs, ds := b.api.RetrySet(), b.api.DeadSet()
	require.Equal(t, "retry", rs.Name())

	// The oracle: ZREVRANGE gives Ruby's order (highest score, then
	// greatest member, first).
	var want []string
	for _, s := range b.strings(t, "ZREVRANGE", "retry", 0, -1) {
		j, err := wire.ParseJob([]byte(s))
		require.NoError(t, err)
		want = append(want, j.JID())
	}
	require.Equal(t, "r119", want[0])

	var got []*api.SortedEntry
	require.NoError(t, rs.Each(ctx, func(e *api.SortedEntry) error {
		got = append(got, e)
		return nil
	}))
	require.Equal(t, want, apiJIDs(got))
	require.Equal(t, 1795300119.0, got[0].Score)
	require.Equal(t, time.Unix(1795300119, 0), got[0].At())
	require.Equal(t, "default", got[0].Queue)

	page, size, err := ds.Page(ctx, nil, 60, 30)
	require.NoError(t, err)
	require.EqualValues(t, 122, size)
	require.Equal(t, want[60:90], apiJIDs(page))
	page, size, err = ds.Page(ctx, nil, 110, 30)
	require.NoError(t, err)
	require.EqualValues(t, 122, size)
	require.Equal(t, want[110:], apiJIDs(page))
	page, size, err = ds.Page(ctx, nil, 0, 0)
	require.NoError(t, err)
	require.EqualValues(t, 122, size)
	require.Equal(t, want[:25], apiJIDs(page))

	// The retry and schedule sets page as the Web UI's Retries and
	// Scheduled pages: ZRANGE from the lowest score, the next due first.
	asc := slices.Clone(b.strings(t, "ZRANGE", "retry", 0, -1))
	for i, s := range asc {
		j, err := wire.ParseJob([]byte(s))
		require.NoError(t, err)
		asc[i] = j.JID()
	}
	require.Equal(t, "r000", asc[0])
	page, size, err = rs.Page(ctx, nil, 0, 5)
	require.NoError(t, err)
	require.EqualValues(t, 122, size)
	require.Equal(t, asc[:5], apiJIDs(page))
	page, size, err = rs.Page(ctx, nil, 110, 30)
	require.NoError(t, err)
	require.EqualValues(t, 122, size)
	require.Equal(t, asc[110:], apiJIDs(page))
	n, err := rs.Size(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 122, n)

	page, size, err = rs.Page(ctx, nil, 25, 30)
	require.NoError(t, err)
	require.EqualValues(t, 122, size)
	require.Equal(t, asc[25:55], apiJIDs(page))
	require.Equal(t, "r025", page[0].JID())
}

func TestAPISetEachWithDeletes(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	apiFillSet(t, b, "schedule", 130)
	var seen []string
	require.NoError(t, b.api.ScheduledSet().Each(ctx, func(e *api.SortedEntry) error {
		seen = append(seen, e.JID())
		if e.JID() != "r007" {
			ok, err := e.Delete(ctx)
			require.NoError(t, err)
			require.True(t, ok)
		}
		return nil
	}))
	require.Len(t, seen, 130)
	slices.Sort(seen)
	require.Len(t, slices.Compact(seen), 130)
	require.EqualValues(t, 1, b.int(t, "ZCARD", "schedule"))

	errBoom := errors.New("boom")
	require.ErrorIs(t, b.api.ScheduledSet().Each(ctx, func(*api.SortedEntry) error { return errBoom }), errBoom)
}

func TestAPISetScanFindFetch(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	apiFillSet(t, b, "dead", 300)
	b.do(t, "ZADD", "dead", 1795300001, "not json r001 {")
	ds := b.api.DeadSet()

	var scanned []string
	require.NoError(t, ds.Scan(ctx, "r01", func(e *api.SortedEntry) error {
		scanned = append(scanned, e.JID())
		return nil
	}))
	slices.Sort(scanned)
	require.Equal(t, []string{"r010", "r011", "r012", "r013", "r014", "r015", "r016", "r017", "r018", "r019"}, scanned)
	scanned = nil
	require.NoError(t, ds.Scan(ctx, `*"jid":"r29*`, func(e *api.SortedEntry) error {
		scanned = append(scanned, e.JID())
		return nil
	}))
	require.Len(t, scanned, 10)

	e, err := ds.FindJob(ctx, "r001")
	require.NoError(t, err)
	require.Equal(t, "r001", e.JID())
	require.Equal(t, 1795300001.0, e.Score)
	require.NotNil(t, e.Job)
	_, err = ds.FindJob(ctx, "nope")
	require.ErrorIs(t, err, api.ErrJobNotFound)

	got, err := ds.Fetch(ctx, 1795300001, "")
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, "not json r001 {", string(got[0].Value))
	require.Nil(t, got[0].Job)
	require.Equal(t, []rubyjson.Value{rubyjson.StringValue("not json r001 {")}, got[0].Args())
	require.Equal(t, "", got[0].JID())
	got, err = ds.Fetch(ctx, 1795300001, "r001")
	require.NoError(t, err)
	require.Equal(t, []string{"r001"}, apiJIDs(got))
	got, err = ds.Fetch(ctx, 1795300010.5, "")
	require.NoError(t, err)
	require.Empty(t, got)

	// Unparsable members are listed, with args = [raw].
	page, _, err := ds.Page(ctx, nil, 297, 5)
	require.NoError(t, err)
	require.Len(t, page, 4)
	require.ElementsMatch(t, []string{"r001", ""}, apiJIDs(page[1:3]))
}

func TestAPISetScheduleDeleteClear(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	ss := b.api.ScheduledSet()
	job, err := wire.NewJob("Later", 1)
	require.NoError(t, err)
	job.Set("jid", rubyjson.StringValue("s1"))
	require.NoError(t, ss.Schedule(ctx, time.Unix(1795300000, 250000000), job))
	require.Equal(t, []string{`{"class":"Later","args":[1],"jid":"s1"}`, "1795300000.25"}, b.strings(t, "ZRANGE", "schedule", 0, -1, "WITHSCORES"))

	got, err := ss.Fetch(ctx, 1795300000.25, "other")
	require.NoError(t, err)
	require.Empty(t, got)
	got, err = ss.Fetch(ctx, 1795300000.25, "s1")
	require.NoError(t, err)
	require.Len(t, got, 1)
	ok, err := got[0].Delete(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = got[0].Delete(ctx)
	require.NoError(t, err)
	require.False(t, ok)

	apiFillSet(t, b, "schedule", 3)
	require.NoError(t, ss.Clear(ctx))
	require.Zero(t, b.int(t, "EXISTS", "schedule"))
}

func TestAPIEntryRetry(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	member := apiPayload("j1", `,"error_message":"boom","error_class":"RuntimeError","failed_at":1795296002.5,"retry_count":0`)
	b.do(t, "ZADD", "retry", "1795296600.125", member)
	e, err := b.api.RetrySet().FindJob(ctx, "j1")
	require.NoError(t, err)
	res, err := e.Retry(ctx)
	require.NoError(t, err)
	want := `{"retry":true,"queue":"default","class":"HardJob","args":[1,"é"],"jid":"j1","created_at":1795296000.5,"enqueued_at":1795296573.1651707,"error_message":"boom","error_class":"RuntimeError","failed_at":1795296002.5,"retry_count":-1}`
	require.Equal(t, want, string(res.Payload))
	require.Equal(t, []string{want}, b.strings(t, "LRANGE", "queue:default", 0, -1))
	require.Equal(t, []string{"default"}, b.strings(t, "SMEMBERS", "queues"))
	require.Zero(t, b.int(t, "EXISTS", "retry"))

	// Gone meanwhile: nothing happens.
	_, err = e.Retry(ctx)
	require.ErrorIs(t, err, api.ErrJobNotFound)
	require.EqualValues(t, 1, b.int(t, "LLEN", "queue:default"))
}

func TestAPIEntryRetrySameScoreSiblings(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	s1, s2, s3 := apiPayload("s1", ""), apiPayload("s2", `,"retry_count":4`), apiPayload("s3", "")
	b.do(t, "ZADD", "retry", "1795296600.5", s1, "1795296600.5", s2, "1795296600.5", s3, 7, "other")
	e, err := b.api.RetrySet().FindJob(ctx, "s2")
	require.NoError(t, err)
	res, err := e.Retry(ctx)
	require.NoError(t, err)
	require.Contains(t, string(res.Payload), `"retry_count":3`)
	require.Equal(t, []string{"other", "7", s1, "1795296600.5", s3, "1795296600.5"}, b.strings(t, "ZRANGE", "retry", 0, -1, "WITHSCORES"))
	require.Equal(t, []string{"s2"}, apiQueueJIDs(t, b, "default"))

	// With a single member at the score, Ruby's remove_job takes it
	// whatever its jid; so does gojob.
	b.do(t, "ZREM", "retry", s1, s3)
	b.do(t, "ZADD", "retry", "1795296600.5", s3)
	_, err = e.Retry(ctx) // e is s2's entry
	require.NoError(t, err)
	require.Equal(t, []string{"s3", "s2"}, apiQueueJIDs(t, b, "default"))
}

func TestAPIEntryRetryPushFailurePutsBack(t *testing.T) {
	t.Parallel()
	errNo := errors.New("no pushes today")
	b := apiSetup(t, func(c *api.Config) {
		cl, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: c.Pool, Clock: c.Clock,
			Middleware: []sidekiq.Middleware{func(ctx context.Context, job *wire.Job, next func(context.Context) error) error {
				return errNo
			}}})
		require.NoError(t, err)
		c.Client = cl
	})
	ctx := context.Background()
	s1, s2 := apiPayload("s1", ""), apiPayload("s2", `,"retry_count":4`)
	b.do(t, "ZADD", "retry", "1795296600.5", s1, "1795296600.5", s2)
	e, err := b.api.RetrySet().FindJob(ctx, "s2")
	require.NoError(t, err)
	_, err = e.Retry(ctx)
	require.ErrorIs(t, err, errNo)
	// Both members are back, unchanged, at their score.
	require.Equal(t, []string{s1, "1795296600.5", s2, "1795296600.5"}, b.strings(t, "ZRANGE", "retry", 0, -1, "WITHSCORES"))
	require.Zero(t, b.int(t, "EXISTS", "queue:default"))
}

func TestAPIEntryUnparsable(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	b.do(t, "ZADD", "dead", 5, "garbage {", 5, apiPayload("g1", ""))
	page, _, err := b.api.DeadSet().Page(ctx, nil, 0, 0)
	require.NoError(t, err)
	// Equal scores: the greater member ('{' > 'g') is listed first.
	bad := page[1]
	require.Nil(t, bad.Job)
	_, err = bad.Retry(ctx)
	require.ErrorIs(t, err, api.ErrUnparsableJob)
	require.ErrorIs(t, bad.Reschedule(ctx, apiNow), api.ErrUnparsableJob)
	require.EqualValues(t, 2, b.int(t, "ZCARD", "dead"))

	// Kill and delete work on the exact bytes, siblings are kept.
	b.do(t, "ZADD", "retry", 5, "garbage {", 5, apiPayload("g1", ""))
	page, _, err = b.api.RetrySet().Page(ctx, nil, 0, 0)
	require.NoError(t, err)
	// Lowest first: the lesser member ('g' < '{') is listed first.
	_, err = page[0].Kill(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, []string{apiPayload("g1", "")}, b.strings(t, "ZRANGE", "retry", 0, -1))
	require.Equal(t, []string{"garbage {", "1795296573.1651707"}, b.strings(t, "ZRANGEBYSCORE", "dead", 6, "+inf", "WITHSCORES"))
	require.Empty(t, b.deaths)
	ok, err := bad.Delete(ctx)
	require.NoError(t, err)
	require.True(t, ok)
}

func TestAPIEntryRetryScheduled(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	// A scheduled job as a Ruby client leaves it, and a bare one.
	b.do(t, "ZADD", "schedule",
		"1795300000.5", `{"retry":true,"queue":"low","class":"Later","args":[],"jid":"a1","created_at":1795296000.5,"retry_count":3}`,
		"1795300001.5", `{"class":"Bare","args":[null],"jid":"a2"}`)
	ss := b.api.ScheduledSet()
	for _, jid := range []string{"a1", "a2"} {
		e, err := ss.FindJob(ctx, jid)
		require.NoError(t, err)
		_, err = e.Retry(ctx) // a scheduled entry keeps its retry_count
		require.NoError(t, err)
	}
	require.Equal(t, []string{`{"retry":true,"queue":"low","class":"Later","args":[],"jid":"a1","created_at":1795296000.5,"retry_count":3,"enqueued_at":1795296573.1651707}`},
		b.strings(t, "LRANGE", "queue:low", 0, -1))
	require.Equal(t, []string{`{"retry":true,"queue":"default","class":"Bare","args":[null],"jid":"a2","created_at":1795296573.1651707,"enqueued_at":1795296573.1651707}`},
		b.strings(t, "LRANGE", "queue:default", 0, -1))
	require.ElementsMatch(t, []string{"low", "default"}, b.strings(t, "SMEMBERS", "queues"))
}

func TestAPIEntryKill(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	m1, m2 := apiPayload("k1", `,"retry_count":1`), apiPayload("k2", "")
	b.do(t, "ZADD", "retry", 10, m1, 11, m2)
	rs := b.api.RetrySet()
	e, err := rs.FindJob(ctx, "k1")
	require.NoError(t, err)
	_, err = e.Kill(ctx, nil)
	require.NoError(t, err)
	e, err = rs.FindJob(ctx, "k2")
	require.NoError(t, err)
	b.clk.Advance(time.Second)
	_, err = e.Kill(ctx, &api.KillOpts{SkipDeathHandlers: true})
	require.NoError(t, err)
	require.Equal(t, []string{m1, "1795296573.1651707", m2, "1795296574.1651707"}, b.strings(t, "ZRANGE", "dead", 0, -1, "WITHSCORES"))
	require.Zero(t, b.int(t, "EXISTS", "retry"))
	require.Equal(t, []string{"k1: sidekiq: job killed by API"}, b.deaths)
}

func TestAPIEntryReschedule(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	canonical := apiPayload("c1", "")
	spaced := `{"class": "A", "args": [], "jid": "c2"}`
	b.do(t, "ZADD", "schedule", "1795300000.5", canonical, "1795300000.75", spaced)
	ss := b.api.ScheduledSet()
	at := time.Unix(1795400000, 250000000)
	for _, jid := range []string{"c1", "c2"} {
		e, err := ss.FindJob(ctx, jid)
		require.NoError(t, err)
		require.NoError(t, e.Reschedule(ctx, at))
	}
	// The canonical member moved; the spaced one stays and Ruby's
	// re-encoding is added with the difference as its score (the
	// re-serialization hazard, as in Ruby).
	require.Equal(t, []string{
		`{"class":"A","args":[],"jid":"c2"}`, "99999.5",
		spaced, "1795300000.75",
		canonical, "1795400000.25",
	}, b.strings(t, "ZRANGE", "schedule", 0, -1, "WITHSCORES"))
}

func TestAPIRetryAllRubyOrder(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	apiFillSet(t, b, "retry", 120)
	res, err := b.api.RetrySet().RetryAll(ctx)
	require.NoError(t, err)
	require.Equal(t, &api.BulkActionResult{Moved: 120}, res)
	// Ruby 6.4's `each(&:retry) while size > 0` pushes r119…r070 (page
	// -50..-1), then r019…r000 (page -100..-51 of the 70 left), then in a
	// second pass r069…r020. LRANGE lists the last push first.
	var want []string
	for i := 20; i <= 69; i++ {
		want = append(want, fmt.Sprintf("r%03d", i))
	}
	for i := 0; i <= 19; i++ {
		want = append(want, fmt.Sprintf("r%03d", i))
	}
	for i := 70; i <= 119; i++ {
		want = append(want, fmt.Sprintf("r%03d", i))
	}
	require.Equal(t, want, apiQueueJIDs(t, b, "default"))
	first, err := redis.String(b.do(t, "LINDEX", "queue:default", 0), nil)
	require.NoError(t, err)
	require.Contains(t, first, `"retry_count":1`)
}

func TestAPIKillAllAndDeadRetryAll(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	apiFillSet(t, b, "retry", 60)
	res, err := b.api.RetrySet().KillAll(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, &api.BulkActionResult{Moved: 60}, res)
	require.EqualValues(t, 60, b.int(t, "ZCARD", "dead"))
	require.Len(t, b.deaths, 60)
	require.Equal(t, "r059: sidekiq: job killed by API", b.deaths[0])
	_, err = b.api.DeadSet().KillAll(ctx, nil)
	require.ErrorContains(t, err, "dead already")

	b.do(t, "ZADD", "dead", 1, "unparsable {")
	res, err = b.api.DeadSet().RetryAll(ctx)
	require.NoError(t, err)
	require.Equal(t, &api.BulkActionResult{Moved: 60, Remaining: 1}, res)
	require.Equal(t, []string{"unparsable {"}, b.strings(t, "ZRANGE", "dead", 0, -1))
	require.EqualValues(t, 60, b.int(t, "LLEN", "queue:default"))
}

func TestAPIScheduledRetryAll(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	apiFillSet(t, b, "schedule", 75)
	res, err := b.api.ScheduledSet().RetryAll(ctx)
	require.NoError(t, err)
	require.Equal(t, 75, res.Moved)
	require.Zero(t, b.int(t, "EXISTS", "schedule"))
	first, err := redis.String(b.do(t, "LINDEX", "queue:default", -1), nil)
	require.NoError(t, err)
	require.Contains(t, first, `"jid":"r074"`)
	require.Contains(t, first, `"retry_count":2`)
}
