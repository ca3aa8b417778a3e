package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/cron"
	"github.com/gojob/gojob/durable"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/web"
)

// opsBundle is a dashboard over a private Redis for the operator tests.
type opsBundle struct {
	redis *redistest.Server
	pool  *redis.Pool
	api   *api.API
	srv   *httptest.Server
}

func opsSetup(t *testing.T, cfg *web.Config, ro ...redistest.Options) *opsBundle {
	t.Helper()
	var o redistest.Options
	if len(ro) > 0 {
		o = ro[0]
	}
	r := redistest.StartWith(t, o)
	pool := r.Pool(t)
	a, err := api.New(&api.Config{Pool: pool})
	require.NoError(t, err)
	cfg.Pool, cfg.API = pool, a
	h, err := web.New(cfg)
	require.NoError(t, err)
	b := &opsBundle{redis: r, pool: pool, api: a, srv: httptest.NewServer(h)}
	t.Cleanup(b.srv.Close)
	return b
}

func (b *opsBundle) do(t *testing.T, args ...any) any {
	t.Helper()
	c := b.pool.Get()
	defer c.Close()
	v, err := c.Do(args[0].(string), args[1:]...)
	require.NoError(t, err)
	return v
}

// seedSet adds n entries to a sorted set in one pipeline: entry i has
// class classOf(i), jid jid-<i> and score base+score(i).
func (b *opsBundle) seedSet(t *testing.T, key string, n int, classOf func(int) string, score func(int) float64) {
	t.Helper()
	c := b.pool.Get()
	defer c.Close()
	base := float64(time.Now().Unix())
	for i := range n {
		payload := fmt.Sprintf(`{"class":%q,"args":[%d],"jid":"jid-%06d","queue":"default","retry":true,"retry_count":1,"created_at":%d,"enqueued_at":%d,"failed_at":%d,"error_class":"RuntimeError","error_message":"boom"}`,
			classOf(i), i, i, int(base), int(base), int(base))
		require.NoError(t, c.Send("ZADD", key, base+score(i), payload))
	}
	require.NoError(t, c.Flush())
	for range n {
		_, err := c.Receive()
		require.NoError(t, err)
	}
}

func (b *opsBundle) size(t *testing.T, key string) int64 {
	n, err := redis.Int64(b.do(t, "ZCARD", key), nil)
	require.NoError(t, err)
	return n
}

// csrfPost loads page (for the cookie and token) and posts form to target.
func csrfPost(t *testing.T, c *http.Client, page, target string, form url.Values) *http.Response {
	t.Helper()
	code, body := get(t, c, page)
	require.Equal(t, 200, code, body)
	m := csrfRe.FindStringSubmatch(body)
	require.NotNil(t, m, "the page carries a CSRF token")
	form.Set("csrf", m[1])
	resp, err := c.PostForm(target, form)
	require.NoError(t, err)
	resp.Body.Close()
	return resp
}

func TestForeignHostAndOriginAreRefused(t *testing.T) {
	t.Parallel()
	b := opsSetup(t, &web.Config{AllowHosts: []string{"ops.example.com"}})
	b.seedSet(t, "retry", 3, func(int) string { return "SomeJob" }, func(i int) float64 { return float64(i) })
	c := client(t)

	// A DNS-rebinding page: its name resolves to the dashboard's address,
	// but its requests name its own host.
	req, _ := http.NewRequest("GET", b.srv.URL+"/retries", nil)
	req.Host = "evil.example:9292"
	resp, err := c.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, string(body), "--allow-host")

	// Even with a valid token from an earlier visit, a POST for a foreign
	// host is refused before it acts.
	code, page := get(t, c, b.srv.URL+"/retries")
	require.Equal(t, 200, code)
	tok := csrfRe.FindStringSubmatch(page)[1]
	form := url.Values{"action": {"delete_all"}, "csrf": {tok}}
	req, _ = http.NewRequest("POST", b.srv.URL+"/retries", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Host = "evil.example"
	resp, err = c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.EqualValues(t, 3, b.size(t, "retry"))

	// A cross-site POST that names the right host but comes from another
	// origin is refused too.
	req, _ = http.NewRequest("POST", b.srv.URL+"/retries", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://evil.example")
	resp, err = c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.EqualValues(t, 3, b.size(t, "retry"))

	// Loopback names and --allow-host names are served.
	for _, host := range []string{"localhost", "127.0.0.1", "[::1]:9292", "ops.example.com", "OPS.example.com:443"} {
		req, _ = http.NewRequest("GET", b.srv.URL+"/", nil)
		req.Host = host
		resp, err = c.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, host)
	}
	// The dashboard's own origin may post.
	req, _ = http.NewRequest("POST", b.srv.URL+"/retries", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", b.srv.URL)
	resp, err = c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.EqualValues(t, 0, b.size(t, "retry"))
}

func TestClientMadeCSRFCookieIsRefused(t *testing.T) {
	t.Parallel()
	b := opsSetup(t, &web.Config{})
	b.seedSet(t, "retry", 2, func(int) string { return "SomeJob" }, func(i int) float64 { return float64(i) })
	// The double-submit attack: the client sets a cookie of its choosing
	// and sends the same value as the form's token.
	made := "0123456789abcdef0123456789abcdef"
	form := url.Values{"action": {"delete_all"}, "csrf": {made}}
	req, _ := http.NewRequest("POST", b.srv.URL+"/retries", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: "gojob_csrf", Value: made})
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.EqualValues(t, 2, b.size(t, "retry"))

	// The token a page hands out is not the cookie's value.
	c := client(t)
	_, page := get(t, c, b.srv.URL+"/retries")
	tok := csrfRe.FindStringSubmatch(page)[1]
	for _, ck := range c.Jar.Cookies(mustURL(t, b.srv.URL)) {
		if ck.Name == "gojob_csrf" {
			require.NotEqual(t, tok, ck.Value)
		}
	}
	// A token of one dashboard process is not valid for another's.
	other := opsSetup(t, &web.Config{})
	req, _ = http.NewRequest("POST", other.srv.URL+"/retries", strings.NewReader(url.Values{"action": {"delete_all"}, "csrf": {tok}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, ck := range c.Jar.Cookies(mustURL(t, b.srv.URL)) {
		req.AddCookie(ck)
	}
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	resp = csrfPost(t, c, b.srv.URL+"/retries", b.srv.URL+"/retries", url.Values{"action": {"delete_all"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.EqualValues(t, 0, b.size(t, "retry"))
}

var linkRe = regexp.MustCompile(`(?i)\s(?:href|src|action)="([^"]*)"`)

func TestBasePathPrefixesEveryLinkFormAndRedirect(t *testing.T) {
	t.Parallel()
	const prefix = "/ops/gojob"
	b := opsSetup(t, &web.Config{BasePath: prefix})
	b.seedSet(t, "retry", 30, func(int) string { return "SomeJob" }, func(i int) float64 { return float64(i) })
	b.seedSet(t, "schedule", 2, func(int) string { return "LaterJob" }, func(i int) float64 { return 3600 + float64(i) })
	b.seedSet(t, "dead", 2, func(int) string { return "DeadJob" }, func(i int) float64 { return -float64(i) })
	_, err := b.api.Client().Enqueue(context.Background(), "default", "SomeJob", 1)
	require.NoError(t, err)
	c := client(t)
	// The proxy may forward the prefix or strip it: both are served.
	code, _ := get(t, c, b.srv.URL+"/retries")
	require.Equal(t, 200, code)

	seen := map[string]bool{}
	queue := []string{prefix + "/"}
	for len(queue) > 0 && len(seen) < 60 {
		p := queue[0]
		queue = queue[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		code, page := get(t, c, b.srv.URL+p)
		require.Equal(t, 200, code, p)
		for _, m := range linkRe.FindAllStringSubmatch(page, -1) {
			link := strings.ReplaceAll(m[1], "&amp;", "&")
			require.True(t, strings.HasPrefix(link, prefix+"/"), "page %s: link %q lacks the prefix", p, link)
			u, err := url.Parse(link)
			require.NoError(t, err)
			if !strings.HasSuffix(u.Path, ".json") && u.Path != prefix+"/metrics" && !strings.Contains(u.Path, "/static/") {
				queue = append(queue, u.Path)
			}
		}
	}
	require.True(t, seen[prefix+"/retries"] && seen[prefix+"/dead"] && seen[prefix+"/queues/default"], "the walk reached the pages: %v", seen)
	for _, asset := range []string{"/static/app.css", "/static/app.js", "/metrics"} {
		code, _ := get(t, c, b.srv.URL+prefix+asset)
		require.Equal(t, 200, code, asset)
	}
	// A POST's redirect keeps the prefix.
	resp := csrfPost(t, c, b.srv.URL+prefix+"/queues", b.srv.URL+prefix+"/queues/default", url.Values{"action": {"clear"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.True(t, strings.HasPrefix(resp.Header.Get("Location"), prefix+"/"), resp.Header.Get("Location"))
	// The bare prefix redirects to its page.
	resp, err = c.Get(b.srv.URL + prefix)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, prefix+"/", resp.Header.Get("Location"))
}

func TestCardsFitAnyCountAndWordsAgree(t *testing.T) {
	t.Parallel()
	cfg := &web.Config{}
	b := opsSetup(t, cfg)
	store := &cron.Store{Client: b.api.Client(), Layout: cron.Layout{}}
	cj, err := cron.NewJob("nightly-report", "0 3 * * *", "ReportJob", "default")
	require.NoError(t, err)
	require.NoError(t, store.Save(context.Background(), cj))
	withCron := opsSetupOn(t, b, &web.Config{Cron: store})
	b.do(t, "SET", "stat:processed", 1234567890)
	b.seedSet(t, "retry", 1, func(int) string { return "SomeJob" }, func(int) float64 { return 60 })
	c := client(t)
	_, page := get(t, c, b.srv.URL+"/")
	require.Contains(t, page, `title="1,234,567,890">1.23B</span>`)
	_, page = get(t, c, b.srv.URL+"/retries")
	require.Contains(t, page, "1 job<")
	require.NotContains(t, page, "1 jobs")
	require.Regexp(t, `<time datetime="[0-9T:-]+Z" title="[0-9: -]+ UTC">in [0-9]+ s</time>`, page)
	_, page = get(t, c, b.srv.URL+"/busy")
	require.Contains(t, page, "0 processes")
	_, page = get(t, c, withCron.URL+"/cron")
	require.Contains(t, page, "1 periodic job ·")
}

// opsSetupOn serves another dashboard over b's Redis.
func opsSetupOn(t *testing.T, b *opsBundle, cfg *web.Config) *httptest.Server {
	t.Helper()
	cfg.Pool, cfg.API = b.pool, b.api
	h, err := web.New(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func TestRedisErrorsBecomeSentences(t *testing.T) {
	t.Parallel()
	// A server without BITFIELD, as some Redis imitations: the class page
	// says so instead of showing the reply.
	b := opsSetup(t, &web.Config{}, redistest.Options{Args: []string{"--rename-command", "BITFIELD", ""}})
	code, page := get(t, client(t), b.srv.URL+"/job-metrics/SomeJob")
	require.Equal(t, 200, code)
	require.NotContains(t, page, "ERR")
	require.NotContains(t, strings.ToLower(page), "unknown command `")
	require.Contains(t, page, "does not support the BITFIELD command")
}

func TestSearchCountsAllMatchesAndPagesInDueOrder(t *testing.T) {
	t.Parallel()
	b := opsSetup(t, &web.Config{})
	// 3,000 retries; every third is an InvoiceJob; the scores are shuffled
	// against the insertion order, so ZSCAN's order is not the due order.
	const n = 3000
	score := func(i int) float64 { return float64((i*7919)%n) - 100 }
	classOf := func(i int) string {
		if i%3 == 0 {
			return "InvoiceJob"
		}
		return "OtherJob"
	}
	b.seedSet(t, "retry", n, classOf, score)
	var want []string // the matches' jids in due order
	for i := 0; i < n; i += 3 {
		want = append(want, fmt.Sprintf("jid-%06d", i))
	}
	slices.SortFunc(want, func(a, b string) int {
		var ia, ib int
		fmt.Sscanf(a, "jid-%d", &ia)
		fmt.Sscanf(b, "jid-%d", &ib)
		return int(score(ia) - score(ib))
	})
	jidRe := regexp.MustCompile(`aria-label="select (jid-\d+)"`)
	c := client(t)
	var got []string
	for page := 1; page <= 40; page++ {
		code, body := get(t, c, fmt.Sprintf("%s/retries?q=InvoiceJob&page=%d", b.srv.URL, page))
		require.Equal(t, 200, code)
		require.Contains(t, body, "1,000 jobs matching “InvoiceJob”")
		require.Contains(t, body, fmt.Sprintf("page %d of 40", page))
		require.Contains(t, body, "Retry all 1,000 matches")
		for _, m := range jidRe.FindAllStringSubmatch(body, -1) {
			got = append(got, m[1])
		}
	}
	require.Equal(t, want, got, "every match once, in due order")
	_, body := get(t, c, b.srv.URL+"/dead?q=InvoiceJob")
	require.Contains(t, body, "No job matches")
}

// bulkDone polls the set's progress until its action ends.
func bulkDone(t *testing.T, c *http.Client, u string) map[string]any {
	t.Helper()
	var st map[string]any
	wait.Within(t, 2*time.Minute, "the bulk action ends", func() bool {
		code, body := get(t, c, u)
		require.Equal(t, 200, code)
		st = nil
		require.NoError(t, json.Unmarshal([]byte(body), &st))
		return st != nil && st["state"] != "running"
	})
	return st
}

func TestFilteredBulkActsOnTheMatchesOnlyInTheBackground(t *testing.T) {
	t.Parallel()
	b := opsSetup(t, &web.Config{})
	const n = 3000
	b.seedSet(t, "retry", n, func(i int) string {
		if i%3 == 0 {
			return "InvoiceJob"
		}
		return "OtherJob"
	}, func(i int) float64 { return float64(i) })
	c := client(t)
	resp := csrfPost(t, c, b.srv.URL+"/retries?q=InvoiceJob", b.srv.URL+"/retries",
		url.Values{"action": {"retry_all"}, "q": {"InvoiceJob"}, "back": {"/retries?q=InvoiceJob"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Location"), "started+in+the+background")
	st := bulkDone(t, c, b.srv.URL+"/retries/bulk.json")
	require.Equal(t, "done", st["state"], st)
	require.EqualValues(t, 1000, st["moved"])
	require.EqualValues(t, 1000, st["total"])
	require.EqualValues(t, n-1000, b.size(t, "retry"))
	q, err := b.api.Queue("default").Size(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 1000, q)
	_, body := get(t, c, b.srv.URL+"/retries?q=InvoiceJob")
	require.Contains(t, body, "No job matches")
	require.Contains(t, body, "Retry all (jobs matching “InvoiceJob”) finished: 1,000 jobs")

	// Kill all on the whole set: the rest goes to the dead set.
	resp = csrfPost(t, c, b.srv.URL+"/retries", b.srv.URL+"/retries", url.Values{"action": {"kill_all"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	st = bulkDone(t, c, b.srv.URL+"/retries/bulk.json")
	require.Equal(t, "done", st["state"], st)
	require.EqualValues(t, n-1000, st["moved"])
	require.EqualValues(t, 0, b.size(t, "retry"))
	require.EqualValues(t, n-1000, b.size(t, "dead"))
}

func TestSecondBulkIsRefusedAndProgressShowsEverywhere(t *testing.T) {
	t.Parallel()
	b := opsSetup(t, &web.Config{})
	b.seedSet(t, "schedule", 10, func(int) string { return "LaterJob" }, func(i int) float64 { return 3600 + float64(i) })
	// Another dashboard process is halfway through "Add all to queue".
	started := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano)
	b.do(t, "SET", "gojob-web-bulk-lock:schedule", "other-process", "PX", 60000)
	b.do(t, "HSET", "gojob-web-bulk:schedule", "status",
		`{"action":"add_all","label":"Add all to queue","state":"running","total":200000,"done":50000,"moved":50000,"started":"`+started+`"}`)
	c := client(t)
	_, page := get(t, c, b.srv.URL+"/scheduled")
	require.Contains(t, page, "Add all to queue: 50,000 of 200,000 jobs done")
	require.Contains(t, page, `<progress max="200000" value="50000"`)
	require.Regexp(t, `value="add_all"[^>]* disabled title="Add all to queue is running`, page)

	resp := csrfPost(t, c, b.srv.URL+"/scheduled", b.srv.URL+"/scheduled", url.Values{"action": {"add_all"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	loc, _ := url.QueryUnescape(resp.Header.Get("Location"))
	require.Contains(t, loc, "refused: Add all to queue is still running (50,000 of 200,000 jobs done")
	resp = csrfPost(t, c, b.srv.URL+"/scheduled", b.srv.URL+"/scheduled", url.Values{"action": {"delete_all"}})
	loc, _ = url.QueryUnescape(resp.Header.Get("Location"))
	require.Contains(t, loc, "refused")
	require.EqualValues(t, 10, b.size(t, "schedule"), "nothing moved")

	// That process died: its lease runs out and the page says so.
	b.do(t, "DEL", "gojob-web-bulk-lock:schedule")
	_, page = get(t, c, b.srv.URL+"/scheduled")
	require.Contains(t, page, "stopped after 50,000 of 200,000 jobs")
	resp = csrfPost(t, c, b.srv.URL+"/scheduled", b.srv.URL+"/scheduled", url.Values{"action": {"add_all"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	st := bulkDone(t, c, b.srv.URL+"/scheduled/bulk.json")
	require.Equal(t, "done", st["state"], st)
	require.EqualValues(t, 10, st["moved"])
	require.EqualValues(t, 0, b.size(t, "schedule"))
}

func TestDurablePageMasksQueryPasswords(t *testing.T) {
	t.Parallel()
	const secret = "Sup3rSecretPW"
	// A database that is down: its row in the page shows the URL and the
	// error, neither with the password.
	d, err := durable.New(&durable.Config{URLs: []string{"postgres://app@127.0.0.1:1/app?sslmode=disable&password=" + secret}})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	b := opsSetup(t, &web.Config{Durable: d})
	code, page := get(t, client(t), b.srv.URL+"/durable")
	require.Equal(t, 200, code, page)
	require.NotContains(t, page, secret)
	require.Contains(t, page, "password=xxxxx")
}
