package web_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/api"
)

// setKey is the dashboard's URL key of a set entry.
func setKey(e *api.SortedEntry) string { return contract.FormatScore(e.Score) + "-" + e.JID() }

func firstEntry(t *testing.T, set *api.JobSet, class string) *api.SortedEntry {
	t.Helper()
	var found *api.SortedEntry
	require.NoError(t, set.Each(context.Background(), func(e *api.SortedEntry) error {
		if found == nil && e.Class() == class {
			found = e
		}
		return nil
	}))
	require.NotNil(t, found, "no %s in %s", class, set.Name())
	return found
}

func TestEveryPageLoadsWithoutJavaScriptErrors(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	ctx := context.Background()
	// The gojob process flushes its Sidekiq 7 metrics at its next beat.
	wait.Within(t, 10*time.Second, "GoOkJob metrics", func() bool {
		m, err := w.api.JobMetrics(ctx, 0, "")
		return err == nil && len(m.Classes) > 0
	})
	retry := firstEntry(t, w.api.RetrySet(), "GoFailJob")
	dead := firstEntry(t, w.api.DeadSet(), "DeadJob")
	running, err := w.api.Running(ctx)
	require.NoError(t, err)
	slow := ""
	for _, r := range running {
		if r.Payload != nil && r.Payload.Class() == "GoSlowJob" {
			slow = r.Payload.JID()
		}
	}
	require.NotEmpty(t, slow, "GoSlowJob runs")
	tb := newTab(t)
	pages := []struct {
		name, path string
		want       []string
	}{
		{"dashboard", "/", []string{"PROCESSED", "History", "redis_version", "gojob-web", "ruby-web"}},
		{"busy", "/busy", []string{"gojob-web", "ruby-web", "GoSlowJob", "RubySlowJob", "busy in ruby"}},
		{"queues", "/queues", []string{"waiting", "sj", "Pause"}},
		{"queue", "/queues/waiting", []string{"WaitingJob", "4 jobs"}},
		{"retries", "/retries", []string{"GoFailJob", "ParkedRetryJob", "payment gateway said no"}},
		{"retry", "/retries/" + url.PathEscape(setKey(retry)), []string{"GoFailJob", "RuntimeError: GoFailJob failed: the payment gateway said no", "Retry count"}},
		{"retries-search", "/retries?q=" + retry.JID(), []string{"1 job matching", retry.JID()}},
		{"scheduled", "/scheduled", []string{"LaterJob", "tomorrow"}},
		{"dead", "/dead", []string{"DeadJob", "out of retries"}},
		{"dead-job", "/dead/" + url.PathEscape(setKey(dead)), []string{"app/jobs/dead_job.rb:12:in `perform'"}},
		{"job-running", "/jobs/" + slow, []string{"GoSlowJob", "running on", "started", "Cancel"}},
		{"job-dead", "/jobs/" + dead.JID(), []string{"DeadJob", "dead", "app/jobs/dead_job.rb:12:in `perform'", "Retry now"}},
		{"metrics", "/job-metrics", []string{"GoOkJob", "GoFailJob"}},
		{"metrics-class", "/job-metrics/GoOkJob", []string{"Execution time", "PROCESSED"}},
		{"sidejob", "/sidejob", []string{"Pipeline", "step1"}},
		{"sidejob-parent", fmt.Sprintf("/sidejob/%d", w.sjParent.ID()), []string{"step1", `"root"`}},
		{"sidejob-child", fmt.Sprintf("/sidejob/%d", w.sjParent.ID()+1), []string{"Parent\t#1", `{"rows":3}`, "/results"}},
		{"cron", "/cron", []string{"nightly-report", "0 3 * * *"}},
		{"durable", "/durable", []string{"DurableJob", "sqlite", "waiting"}},
		{"ordered", "/ordered", []string{"orders", "MORGUE", "LAG", "IN FLIGHT"}},
		{"ordered-queue", "/ordered/orders", []string{orderedWorker, "FENCING TOKEN", "LEASE LEFT", "order-13", "the warehouse refused order 13", "Requeue all"}},
	}
	for _, p := range pages {
		tb.open(t, w.web.URL+p.path)
		text := tb.text(t)
		for _, s := range p.want {
			require.Contains(t, text, s, "page %s", p.path)
		}
		// Times show as relative + absolute with a zone, never raw.
		require.NotRegexp(t, `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d`, text, "page %s", p.path)
		require.NotContains(t, text, " jobs\n1 ", "page %s", p.path)
		tb.screenshot(t, p.name)
	}
	require.Empty(t, tb.errors(), "JavaScript errors")

	// The error listener itself works: a thrown error is seen.
	_, err = evalBool(tb, `setTimeout(() => { throw new Error("planted") }); true`)
	require.NoError(t, err)
	wait.Within(t, 5*time.Second, "the planted error seen", func() bool {
		errs := tb.errors()
		return len(errs) == 1 && strings.Contains(errs[0], "planted")
	})
}

func TestButtonsActOnRedisAndProcesses(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	ctx := context.Background()
	tb := newTab(t)
	conn := w.pool.Get()
	defer conn.Close()

	// Retry now: the entry leaves the retry set for its queue.
	e := firstEntry(t, w.api.RetrySet(), "ParkedRetryJob")
	tb.open(t, w.web.URL+"/retries/"+url.PathEscape(setKey(e)))
	tb.click(t, `button[value="retry"]`)
	require.Contains(t, tb.text(t), "Retry now: ParkedRetryJob")
	_, err := w.api.RetrySet().FindJob(ctx, e.JID())
	require.ErrorIs(t, err, api.ErrJobNotFound)
	rec, err := w.api.Queue("parked").FindJob(ctx, e.JID())
	require.NoError(t, err)
	n, _ := rec.Job.RetryCount()
	require.Equal(t, 1, n, "Retry now decrements retry_count, as Ruby")

	// Kill, from the list with a ticked box: the entry moves to the dead set.
	k := firstEntry(t, w.api.RetrySet(), "ParkedKillJob")
	tb.open(t, w.web.URL+"/retries")
	require.NoError(t, runClickCheckbox(tb, setKey(k)))
	tb.click(t, `form#bulk .toolbar button[value="kill"]`)
	require.Contains(t, tb.text(t), "Kill: 1 job")
	_, err = w.api.DeadSet().FindJob(ctx, k.JID())
	require.NoError(t, err)

	// Quiet the Ruby process: it reads the signal at its next beat (5 s in
	// 6.4.1) and says so in its process hash.
	ruby := w.process(t, "ruby-web")
	require.NotNil(t, ruby)
	tb.open(t, w.web.URL+"/busy")
	tb.click(t, fmt.Sprintf(`tr[data-identity=%q] button[value="quiet"]`, ruby.Identity))
	require.Contains(t, tb.text(t), "asked 1 process to quiet")
	// Stop the gojob process at the same time.
	gojob := w.process(t, "gojob-web")
	require.NotNil(t, gojob)
	tb.click(t, fmt.Sprintf(`tr[data-identity=%q] button[value="stop"]`, gojob.Identity))
	require.Contains(t, tb.text(t), "asked 1 process to stop")
	select {
	case <-w.srvDone:
	case <-time.After(15 * time.Second):
		t.Fatal("the gojob server did not stop")
	}
	wait.Within(t, 15*time.Second, "Ruby quiet", func() bool {
		q, _ := redis.String(conn.Do("HGET", ruby.Identity, "quiet"))
		return q == "true"
	})
	tb.open(t, w.web.URL+"/busy")
	text := tb.text(t)
	require.NotContains(t, text, "gojob-web", "a stopped gojob process leaves the processes set")
	require.Contains(t, text, "quiet")
	tb.screenshot(t, "busy-after-quiet-and-stop")

	// Stop the Ruby process too: it exits.
	tb.click(t, fmt.Sprintf(`tr[data-identity=%q] button[value="stop"]`, ruby.Identity))
	select {
	case <-w.rubyDone:
	case <-time.After(20 * time.Second):
		t.Fatal("the Ruby process did not stop")
	}
	require.Empty(t, tb.errors(), "JavaScript errors")
}

// runClickCheckbox ticks the list's box of key.
func runClickCheckbox(tb *tab, key string) error {
	return runJS(tb, fmt.Sprintf(`(() => { const c = document.querySelector('input[name="key"][value=%q]'); c.click(); return c.checked; })()`, key))
}

func runJS(tb *tab, js string) error {
	ok, err := evalBool(tb, js)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("script returned false: %s", strings.TrimSpace(js))
	}
	return nil
}
