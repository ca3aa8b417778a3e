package web_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/web"
)

// waitText waits until the page's text contains want.
func (tb *tab) waitText(t *testing.T, want string) string {
	t.Helper()
	return tb.waitPage(t, want, "true")
}

// waitDone waits until the page a bulk action reloads when it ends shows
// want. app.js writes the result into the running page and then replaces
// the page in the same task, so the text alone may be read from the page
// on its way out, and the next command sent to it finds no page: wait for
// the new page, which has no progress bar.
func (tb *tab) waitDone(t *testing.T, want string) string {
	t.Helper()
	return tb.waitPage(t, want, `document.readyState === "complete" && !document.querySelector("#bulk-progress progress")`)
}

// waitPage waits until the page's text contains want while the JavaScript
// expression cond holds.
func (tb *tab) waitPage(t *testing.T, want, cond string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	look := fmt.Sprintf(`(%s) ? (document.body ? document.body.innerText : "") : ""`, cond)
	for {
		// Each look has a deadline of its own: one sent while the page
		// reloads itself may never be answered.
		lookCtx, cancel := context.WithTimeout(tb.ctx, 5*time.Second)
		s, err := chromedp.Run(lookCtx, chromedp.Evaluate[string](look))
		cancel()
		if err == nil && strings.Contains(s, want) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the page never showed %q:\n%s", tb.url, want, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// jids returns the jids of the list's rows, in order.
func (tb *tab) jids(t *testing.T) []string {
	t.Helper()
	s, err := chromedp.Run(tb.ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('table.jobs input[name="key"]')).map(c => c.getAttribute("aria-label").replace("select ", ""))`))
	must(t, err)
	return s
}

func TestBrowserSearchPagesThroughAllMatchesAndBulkActsOnThem(t *testing.T) {
	t.Parallel()
	b := opsSetup(t, &web.Config{BasePath: "/sk"})
	// 60 InvoiceJobs among 160 retries; their due order is the reverse of
	// their insertion order.
	b.seedSet(t, "retry", 160, func(i int) string {
		if i%8 < 3 {
			return "InvoiceJob"
		}
		return "OtherJob"
	}, func(i int) float64 { return float64(1000 - i) })
	var want []string
	for i := 159; i >= 0; i-- {
		if i%8 < 3 {
			want = append(want, fmt.Sprintf("jid-%06d", i))
		}
	}
	tb := newTab(t)
	tb.open(t, b.srv.URL+"/sk/retries")
	must(t, chromedp.Do(tb.ctx,
		chromedp.SetValue(chromedp.CSS(`form.search input[name="q"]`), "InvoiceJob"),
		chromedp.Submit(chromedp.CSS(`form.search input[name="q"]`))))
	tb.waitText(t, "60 jobs matching “InvoiceJob”")
	tb.waitText(t, "page 1 of 3")
	var got []string
	got = append(got, tb.jids(t)...)
	for page := 2; page <= 3; page++ {
		must(t, chromedp.Do(tb.ctx, chromedp.Click(chromedp.CSS(`nav.pager a[href$="page=`+fmt.Sprint(page)+`"]`))))
		tb.waitText(t, fmt.Sprintf("page %d of 3", page))
		got = append(got, tb.jids(t)...)
	}
	require.Equal(t, want, got, "the pages show every match once, next due first")

	// The bulk buttons of a filtered page name the matches and act on them
	// only, in the background; the page follows the progress and shows
	// the result.
	// (The page reloads by itself when the action ends, which may be before
	// the page that says it started could be read: the redirect's message
	// is TestFilteredBulkActsOnTheMatchesOnlyInTheBackground's.)
	tb.click(t, `form#bulk button[value="retry_all"]`)
	tb.waitDone(t, "Retry all (jobs matching “InvoiceJob”) finished: 60 jobs")
	require.EqualValues(t, 100, b.size(t, "retry"))
	require.Empty(t, tb.errors(), "JavaScript errors")
	tb.screenshot(t, "retries-filtered-bulk-done")
}

func TestBrowserBulkProgressBarFollowsRedis(t *testing.T) {
	t.Parallel()
	b := opsSetup(t, &web.Config{})
	b.seedSet(t, "schedule", 5, func(int) string { return "LaterJob" }, func(i int) float64 { return 3600 + float64(i) })
	started := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano)
	status := func(state string, done int) string {
		return fmt.Sprintf(`{"action":"add_all","label":"Add all to queue","state":%q,"total":100,"done":%d,"moved":%d,"started":%q}`, state, done, done, started)
	}
	// Another dashboard process runs "Add all to queue".
	b.do(t, "SET", "gojob-web-bulk-lock:schedule", "other-process", "PX", 120000)
	b.do(t, "HSET", "gojob-web-bulk:schedule", "status", status("running", 10))
	tb := newTab(t)
	tb.open(t, b.srv.URL+"/scheduled")
	tb.waitText(t, "Add all to queue: 10 of 100 jobs done")
	tb.screenshot(t, "scheduled-bulk-progress")

	b.do(t, "HSET", "gojob-web-bulk:schedule", "status", status("running", 60))
	tb.waitText(t, "Add all to queue: 60 of 100 jobs done")
	v, err := chromedp.Run(tb.ctx, chromedp.Evaluate[float64](`document.querySelector("#bulk-progress progress").value`))
	must(t, err)
	require.EqualValues(t, 60, v)

	// It ends: the page reloads by itself and shows the result.
	b.do(t, "HSET", "gojob-web-bulk:schedule", "status", status("done", 100))
	b.do(t, "DEL", "gojob-web-bulk-lock:schedule")
	tb.waitDone(t, "Add all to queue finished: 100 jobs")
	require.Empty(t, tb.errors(), "JavaScript errors")
}
