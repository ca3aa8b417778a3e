package api_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/api"
)

// filterPayload is a failed job of class in queue with jid.
func filterPayload(queue, class, jid, errClass, errMsg string) string {
	return fmt.Sprintf(`{"retry":true,"queue":%q,"class":%q,"args":[1],"jid":%q,"error_class":%q,"error_message":%q,"failed_at":1795296000.5}`,
		queue, class, jid, errClass, errMsg)
}

// seedFilterSet fills set with jobs of every kind a filter tells apart, due
// (or dead) one second apart in the order given, and returns the mailer
// job's jid.
func seedFilterSet(t *testing.T, b *apiBundle, set string) {
	t.Helper()
	mailer, err := os.ReadFile("../../testdata/activejob/mailer-retry.json")
	require.NoError(t, err)
	members := []string{
		filterPayload("default", "HardJob", "a1", "RuntimeError", "Boom at step 3"),
		filterPayload("default", "HardJob", "a10", "ArgumentError", "bad *glob? [x]"),
		filterPayload("mail", "HardJob", "a2", "RuntimeError", "timeout"),
		filterPayload("mail", "EasyJob", "a3", "Net::ReadTimeout", "boom"),
		strings.TrimSpace(string(mailer)), // jid aa11bb22cc33dd44ee55ff66
		"not a job {HardJob",
	}
	args := []any{set}
	for i, m := range members {
		args = append(args, float64(apiNow.Unix()-100+int64(i)), m)
	}
	b.do(t, "ZADD", args...)
}

func searchJIDs(t *testing.T, s *api.JobSet, f *api.Filter) []string {
	t.Helper()
	entries, n, err := s.Page(context.Background(), f, 0, 100)
	require.NoError(t, err)
	require.EqualValues(t, len(entries), n, "every match counted once")
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.JID()
		if e.Job == nil {
			out[i] = "(raw)"
		}
	}
	return out
}

// A Filter's fields, each alone and together: the cli's flags and the Web
// UI's search are one filter.
func TestFilterFieldsSelectJobs(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	seedFilterSet(t, b, "retry")
	rs := b.api.RetrySet()
	const mailer = "aa11bb22cc33dd44ee55ff66"
	for _, c := range []struct {
		name string
		f    *api.Filter
		want []string
	}{
		{"nil: every entry", nil, []string{"a1", "a10", "a2", "a3", mailer, "(raw)"}},
		{"zero: every entry", &api.Filter{}, []string{"a1", "a10", "a2", "a3", mailer, "(raw)"}},
		{"queue, the whole name", &api.Filter{Queue: "mail"}, []string{"a2", "a3"}},
		{"queue is not a part", &api.Filter{Queue: "mai"}, []string{}},
		{"class", &api.Filter{Class: "HardJob"}, []string{"a1", "a10", "a2"}},
		{"a mailer job's mailer", &api.Filter{Class: "UserMailer"}, []string{mailer}},
		{"a mailer job as listed", &api.Filter{Class: "UserMailer#welcome"}, []string{mailer}},
		{"an ActiveJob's wrapped class", &api.Filter{Class: "ActionMailer::MailDeliveryJob"}, []string{mailer}},
		{"an ActiveJob's payload class", &api.Filter{Class: "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper"}, []string{mailer}},
		{"class is not a part", &api.Filter{Class: "User"}, []string{}},
		{"jid, the whole of it", &api.Filter{JID: "a1"}, []string{"a1"}},
		{"error class or message, any case", &api.Filter{Error: "BOOM"}, []string{"a1", "a3"}},
		{"error across class and message", &api.Filter{Error: "error: bad"}, []string{"a10"}},
		{"text, case-sensitive", &api.Filter{Text: "Boom"}, []string{"a1"}},
		{"text finds an unparsable payload", &api.Filter{Text: "HardJob"}, []string{"a1", "a10", "a2", "(raw)"}},
		{"text: glob characters are literal", &api.Filter{Text: "*glob? [x]"}, []string{"a10"}},
		{"text: a mailer as listed", &api.Filter{Text: "UserMailer#welcome"}, []string{mailer}},
		{"fields together", &api.Filter{Queue: "default", Class: "HardJob", Error: "runtime"}, []string{"a1"}},
		{"text and a field", &api.Filter{Text: "HardJob", Queue: "mail"}, []string{"a2"}},
	} {
		require.Equal(t, c.want, append([]string{}, searchJIDs(t, rs, c.f)...), c.name)
	}

	// The dead set lists the newest first, and so does its search.
	b.do(t, "ZUNIONSTORE", "dead", 1, "retry")
	require.Equal(t, []string{"a2", "a10", "a1"}, searchJIDs(t, b.api.DeadSet(), &api.Filter{Class: "HardJob"}))

	// Paging through the matches: offset and limit count matches.
	ctx := context.Background()
	entries, n, err := rs.Page(ctx, &api.Filter{Text: "HardJob"}, 1, 2)
	require.NoError(t, err)
	require.EqualValues(t, 4, n)
	require.Equal(t, []string{"a10", "a2"}, apiJIDs(entries))
	entries, n, err = rs.Page(ctx, &api.Filter{Text: "HardJob"}, 10, 2)
	require.NoError(t, err)
	require.EqualValues(t, 4, n)
	require.Empty(t, entries)
	_, _, err = rs.Page(ctx, nil, -1, 2)
	require.Error(t, err)
}

// A queue's search reads it newest first and pages through the matches.
func TestQueueSearchPagesNewestFirst(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	for i := range 2500 {
		class := "OtherJob"
		if i%5 == 0 {
			class = "HardJob"
		}
		b.do(t, "LPUSH", "queue:default", filterPayload("default", class, fmt.Sprintf("q%04d", i), "", ""))
	}
	b.do(t, "LPUSH", "queue:default", "not a job HardJob")
	q := b.api.Queue("default")
	jobs, n, err := q.Page(ctx, &api.Filter{Class: "HardJob"}, 1, 3)
	require.NoError(t, err)
	require.EqualValues(t, 500, n)
	var got []string
	for _, r := range jobs {
		got = append(got, r.JID())
	}
	require.Equal(t, []string{"q2490", "q2485", "q2480"}, got)
	jobs, n, err = q.Page(ctx, &api.Filter{Text: "HardJob"}, 0, 1)
	require.NoError(t, err)
	require.EqualValues(t, 501, n, "the text finds the unparsable one too")
	require.Nil(t, jobs[0].Job)
	jobs, n, err = q.Page(ctx, nil, 0, 0)
	require.NoError(t, err)
	require.EqualValues(t, 2501, n)
	require.Len(t, jobs, 25)
}

// Bulk counts the entries gone before it reached them and those it leaves
// because they are not jobs.
func TestBulkCountsGoneAndLeftEntries(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	job := func(i int) string { return filterPayload("default", "MailJob", fmt.Sprintf("m%d", i), "E", "boom") }
	for i := range 6 {
		b.do(t, "ZADD", "retry", apiNow.Unix()+int64(10*i), job(i))
	}
	b.do(t, "ZADD", "retry", apiNow.Unix()+25, "not a job {")
	var seen []api.BulkActionResult
	res, err := b.api.RetrySet().Bulk(ctx, "retry", nil, func(r *api.BulkActionResult) error {
		seen = append(seen, *r)
		if len(seen) == 2 {
			// Another process retries two jobs first.
			b.do(t, "ZREM", "retry", job(2), job(4))
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, api.BulkActionResult{Total: 7}, seen[0], "the total comes first")
	require.Equal(t, api.BulkActionResult{Total: 7, Moved: 1}, seen[1])
	require.Len(t, seen, 8, "and the counts after each entry")
	require.Equal(t, &api.BulkActionResult{Total: 7, Moved: 4, Gone: 2, Left: 1}, res)
	require.Equal(t, []string{"m5", "m3", "m1", "m0"}, apiQueueJIDs(t, b, "default"), "pushed in the set's order")
	require.Equal(t, []string{"not a job {"}, b.strings(t, "ZRANGE", "retry", 0, -1))

	_, err = b.api.DeadSet().Bulk(ctx, "kill", nil, nil)
	require.ErrorContains(t, err, "dead already")
	_, err = b.api.DeadSet().Bulk(ctx, "bury", nil, nil)
	require.ErrorContains(t, err, "want retry, kill or delete")
}

// Bulk acts on each job once and stops after as many entries as matched
// when it began: a retried job that fails again and comes back ahead, and
// jobs that arrive, stay.
func TestBulkActsOnceAndStopsAtTheTotal(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	job := func(jid, msg string) string { return filterPayload("default", "MailJob", jid, "E", msg) }
	args := []any{"retry"}
	for i := range 600 {
		args = append(args, apiNow.Unix()+int64(i), job(fmt.Sprintf("p%03d", i), "boom"))
	}
	b.do(t, "ZADD", args...)
	calls := 0
	res, err := b.api.RetrySet().Bulk(ctx, "retry", &api.Filter{Class: "MailJob"}, func(r *api.BulkActionResult) error {
		if calls++; calls == 2 {
			// p000 failed again: back in the set, in the second read's
			// range; a new job arrives behind the rest.
			b.do(t, "ZADD", "retry", apiNow.Unix()+550, job("p000", "again"), apiNow.Unix()+1000, job("new", "boom"))
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, &api.BulkActionResult{Total: 600, Moved: 600}, res)
	left := b.strings(t, "ZRANGE", "retry", 0, -1)
	require.Len(t, left, 2)
	require.Contains(t, left[0], `"again"`)
	require.Contains(t, left[1], `"new"`)
	require.EqualValues(t, 600, b.int(t, "LLEN", "queue:default"))
}

// Bulk works through a set in Page's order from where it got to, by score:
// entries with equal scores across reads, and the dead set newest first.
func TestBulkWalksEqualScoresAndTheDeadSetInOrder(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	// 1,200 entries at one score and 300 at the next: reads of 500 end in
	// the middle of the tie, every third entry matches.
	args := []any{"schedule"}
	for i := range 1500 {
		class := "KeepJob"
		if i%3 == 0 {
			class = "GoJob"
		}
		score := apiNow.Unix() + 60
		if i >= 1200 {
			score++
		}
		args = append(args, score, filterPayload("default", class, fmt.Sprintf("s%04d", i), "", ""))
	}
	b.do(t, "ZADD", args...)
	res, err := b.api.ScheduledSet().Bulk(ctx, "delete", &api.Filter{Class: "GoJob"}, nil)
	require.NoError(t, err)
	require.Equal(t, &api.BulkActionResult{Total: 500, Moved: 500}, res)
	require.EqualValues(t, 1000, b.int(t, "ZCARD", "schedule"))
	require.Empty(t, searchJIDs(t, b.api.ScheduledSet(), &api.Filter{Class: "GoJob"}))

	// The dead set is retried newest death first, as it is listed.
	for i := range 4 {
		b.do(t, "ZADD", "dead", apiNow.Unix()-int64(10*i), filterPayload("default", "HardJob", fmt.Sprintf("d%d", i), "", ""))
	}
	res, err = b.api.DeadSet().Bulk(ctx, "retry", &api.Filter{Queue: "default"}, nil)
	require.NoError(t, err)
	require.Equal(t, 4, res.Moved)
	// LPUSH: the first pushed is the last of the list.
	require.Equal(t, []string{"d3", "d2", "d1", "d0"}, apiQueueJIDs(t, b, "default"))
}

// A filtered bulk kill reports what the dead set's cap dropped, as
// contract.KillDrops predicted from the matches' count.
func TestBulkKillReportsTheDeadSetCap(t *testing.T) {
	t.Parallel()
	b := apiSetup(t, func(c *api.Config) { c.DeadMaxJobs = 5 })
	ctx := context.Background()
	for i := range 3 {
		b.do(t, "ZADD", "dead", apiNow.Unix()-100+int64(i), filterPayload("default", "X", fmt.Sprintf("old%d", i), "", ""))
	}
	for i := range 8 {
		class := "Other"
		if i < 6 {
			class = "Doomed"
		}
		b.do(t, "ZADD", "retry", apiNow.Unix()+int64(i), filterPayload("default", class, fmt.Sprintf("r%d", i), "E", "boom"))
	}
	f := &api.Filter{Class: "Doomed"}
	_, n, err := b.api.RetrySet().Page(ctx, f, 0, 1)
	require.NoError(t, err)
	require.EqualValues(t, 6, n)
	conn := b.pool.Get()
	defer conn.Close()
	drops, err := contract.KillDrops(ctx, conn, b.clk.Now(), b.api.DeadLimits(), n)
	require.NoError(t, err)
	require.EqualValues(t, 5, drops, "3 + 6 = 9, the trim keeps 4")
	res, err := b.api.RetrySet().Bulk(ctx, "kill", f, nil)
	require.NoError(t, err)
	require.Equal(t, &api.BulkActionResult{Total: 6, Moved: 6, Dropped: 5}, res)
	require.EqualValues(t, 4, b.int(t, "ZCARD", "dead"))
	require.EqualValues(t, 2, b.int(t, "ZCARD", "retry"), "the others stay")
	require.Len(t, b.deaths, 6, "the death handlers ran for each kill")
}
