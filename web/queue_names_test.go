package web_test

import (
	"context"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/web"
)

// Every queue name Redis can hold has a working page: the Queues page's
// link leads to it, its pager and its forms come back to it.
func TestEveryQueueNameHasAWorkingPage(t *testing.T) {
	t.Parallel()
	b := opsSetup(t, &web.Config{})
	ctx := context.Background()
	names := []string{"a b", "a/b", "%", "100%", "ünïcödé", "x?y#z", "a+b&c=d", `q"uote<>`, "plain", ".", "..", "a/../b", " "}
	for _, n := range names {
		_, err := b.api.Client().Enqueue(ctx, n, "SomeJob", n)
		require.NoError(t, err)
	}
	for i := range 30 { // a second page
		_, err := b.api.Client().Enqueue(ctx, "a/b", "SomeJob", i)
		require.NoError(t, err)
	}
	c := client(t)
	code, page := get(t, c, b.srv.URL+"/queues")
	require.Equal(t, 200, code, page)
	code, first := get(t, c, b.srv.URL+"/queues/a%2Fb")
	require.Equal(t, 200, code, first)
	next := regexp.MustCompile(`href="(/queues/a%2[fF]b\?page=2)"`).FindStringSubmatch(first)
	require.NotNil(t, next, "the pager links the second page of a/b")
	code, second := get(t, c, b.srv.URL+next[1])
	require.Equal(t, 200, code, second)
	require.Contains(t, second, "<b>SomeJob</b>")
	hrefs := map[string]bool{}
	for _, m := range regexp.MustCompile(`href="(/queues/[^"]+)"`).FindAllStringSubmatch(page, -1) {
		hrefs[html.UnescapeString(m[1])] = true
	}
	for _, n := range names {
		href := "/queues/" + segment(n)
		require.True(t, hrefs[href], "the Queues page links %q as %s; links: %v", n, href, hrefs)
		code, body := get(t, c, b.srv.URL+href)
		require.Equal(t, 200, code, "GET %s: %s", href, body)
		require.Contains(t, html.UnescapeString(body), "<h1>Queue "+n+" <small>", "the page of %q names it", n)
		require.Contains(t, body, "<b>SomeJob</b>", "the page of %q lists its job", n)

		resp := csrfPost(t, c, b.srv.URL+href, b.srv.URL+href, url.Values{"action": {"pause"}, "back": {href}})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, "pause %q", n)
		loc, err := url.Parse(resp.Header.Get("Location"))
		require.NoError(t, err)
		require.Equal(t, href, loc.EscapedPath(), "pausing %q comes back to its page", n)
		paused, err := b.api.PausedQueues(ctx)
		require.NoError(t, err)
		require.Contains(t, paused, n)
	}
}

// /static/ serves its files and lists no directory.
func TestStaticListsNoDirectory(t *testing.T) {
	t.Parallel()
	b := opsSetup(t, &web.Config{})
	c := client(t)
	for _, p := range []string{"/static/", "/static", "/static/./", "/static//"} {
		code, body := get(t, c, b.srv.URL+p)
		require.NotEqual(t, 200, code, "GET %s must not list the files: %s", p, body)
		require.NotContains(t, body, "app.css", "GET %s", p)
	}
	code, body := get(t, c, b.srv.URL+"/static/app.css")
	require.Equal(t, 200, code, body)
	code, _ = get(t, c, b.srv.URL+"/static/nope.css")
	require.Equal(t, 404, code)
}

// The Queues page counts each queue's jobs in the retry, schedule and dead
// sets, lists a queue known only from them, and each count links to the
// set's page searching that queue's jobs.
func TestQueuesPageCountsRetriesScheduledAndDeadPerQueue(t *testing.T) {
	t.Parallel()
	b := opsSetup(t, &web.Config{})
	ctx := context.Background()
	_, err := b.api.Client().Enqueue(ctx, "a/b", "SomeJob", 1)
	require.NoError(t, err)
	_, err = b.api.Client().Enqueue(ctx, "default", "SomeJob", 1)
	require.NoError(t, err)
	add := func(set, queue, jid string, score int) {
		b.do(t, "ZADD", set, score, `{"class":"SomeJob","args":[],"jid":"`+jid+`","queue":"`+queue+`","retry":true,"error_class":"RuntimeError","error_message":"boom"}`)
	}
	add("retry", "a/b", "r1", 2000000000)
	add("retry", "a/b", "r2", 2000000001)
	add("retry", "default", "r3", 2000000002)
	add("schedule", "only-scheduled", "s1", 2000000003)
	add("dead", "a/b", "d1", 1700000000)
	b.do(t, "ZADD", "dead", 1700000001, "not json")

	c := client(t)
	code, page := get(t, c, b.srv.URL+"/queues")
	require.Equal(t, 200, code, page)
	row := func(name string) string {
		m := regexp.MustCompile(`(?s)<tr><td><a href="/queues/` + regexp.QuoteMeta(url.PathEscape(name)) + `"><b>.*?</tr>`).FindString(page)
		require.NotEmpty(t, m, "a row for %s", name)
		return m
	}
	cells := func(r string) []string {
		var out []string
		for _, m := range regexp.MustCompile(`<td class="r">(?:<a href="[^"]*">|<span class="muted">)?([^<]*)`).FindAllStringSubmatch(r, -1) {
			out = append(out, m[1])
		}
		return out
	}
	// Size, latency, retries, scheduled, dead.
	ab := cells(row("a/b"))
	require.Equal(t, []string{"1", "2", "0", "1"}, []string{ab[0], ab[2], ab[3], ab[4]}, "a/b: %s", row("a/b"))
	def := cells(row("default"))
	require.Equal(t, []string{"1", "1", "0", "0"}, []string{def[0], def[2], def[3], def[4]})
	only := cells(row("only-scheduled"))
	require.Equal(t, []string{"0", "0", "1", "0"}, []string{only[0], only[2], only[3], only[4]})

	link := regexp.MustCompile(`href="(/retries\?q=[^"]+)"`).FindAllStringSubmatch(row("a/b"), -1)
	require.Len(t, link, 1)
	code, retries := get(t, c, b.srv.URL+html.UnescapeString(link[0][1]))
	require.Equal(t, 200, code, retries)
	require.Contains(t, retries, "r1")
	require.Contains(t, retries, "r2")
	require.NotContains(t, retries, "r3", "the link finds the queue's jobs only")
}

// Kill all warns before it runs when the dead set's cap would drop dead
// jobs, and its result says how many the cap dropped; so does a kill of
// checked jobs.
func TestKillAllWarnsAndReportsTheDeadSetCap(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	pool := r.Pool(t)
	a, err := api.New(&api.Config{Pool: pool, DeadMaxJobs: 5}) // the trim keeps 4
	require.NoError(t, err)
	h, err := web.New(&web.Config{Pool: pool, API: a})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	b := &opsBundle{redis: r, pool: pool, api: a, srv: srv}
	b.seedSet(t, "dead", 2, func(int) string { return "OldJob" }, func(i int) float64 { return float64(-100 + i) })
	b.seedSet(t, "retry", 6, func(int) string { return "MailJob" }, func(i int) float64 { return float64(100 + i) })

	c := client(t)
	code, page := get(t, c, srv.URL+"/retries")
	require.Equal(t, 200, code, page)
	page = html.UnescapeString(page)
	require.Contains(t, page, "Killing all would make the dead set's cap drop 4 dead jobs, the oldest: the dead set keeps at most 4 jobs")
	require.Regexp(t, `value="kill_all"[^>]*data-confirm="[^"]*The dead set's cap will drop 4 dead jobs`, page)

	// A checked job first: the dead set has room for it (2 + 1 <= 4)...
	entries, _, err := a.RetrySet().Page(context.Background(), nil, 0, 2)
	require.NoError(t, err)
	resp := csrfPost(t, c, srv.URL+"/retries", srv.URL+"/retries", url.Values{"action": {"kill"},
		"key": {setKey(entries[0])}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.NotContains(t, resp.Header.Get("Location"), "cap")
	// ... then all the others (5): 3 + 5 = 8, the cap keeps 4.
	resp = csrfPost(t, c, srv.URL+"/retries", srv.URL+"/retries", url.Values{"action": {"kill_all"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	st := bulkDone(t, c, srv.URL+"/retries/bulk.json")
	require.Equal(t, "done", st["state"], st)
	require.EqualValues(t, 5, st["moved"])
	require.EqualValues(t, 4, st["dropped"])
	require.Contains(t, st["summary"], "the dead set's cap dropped 4 dead jobs, the oldest")
	require.EqualValues(t, 4, b.size(t, "dead"))
}

// segment is a queue name as one path segment: escaped, with the dots of
// "." and ".." escaped too (a path would resolve them).
func segment(n string) string {
	e := url.PathEscape(n)
	if e == "." || e == ".." {
		return strings.Repeat("%2E", len(e))
	}
	return e
}
