package web_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/web"
)

// guardBundle is a dashboard over a private Redis with one retry entry.
type guardBundle struct {
	api *api.API
	srv *httptest.Server
}

func guardSetup(t *testing.T, cfg *web.Config) *guardBundle {
	t.Helper()
	r := redistest.Start(t)
	pool := r.Pool(t)
	a, err := api.New(&api.Config{Pool: pool})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = a.Client().Enqueue(ctx, "default", "SomeJob", 1)
	require.NoError(t, err)
	cfg.Pool, cfg.API = pool, a
	h, err := web.New(cfg)
	require.NoError(t, err)
	b := &guardBundle{api: a, srv: httptest.NewServer(h)}
	t.Cleanup(b.srv.Close)
	return b
}

func (b *guardBundle) queueSize(t *testing.T) int64 {
	n, err := b.api.Queue("default").Size(context.Background())
	require.NoError(t, err)
	return n
}

func client(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func TestPostWithoutCSRFTokenIsRefused(t *testing.T) {
	t.Parallel()
	b := guardSetup(t, &web.Config{})
	c := client(t)
	code, page := get(t, c, b.srv.URL+"/queues")
	require.Equal(t, 200, code)
	m := csrfRe.FindStringSubmatch(page)
	require.NotNil(t, m, "the page's forms carry the token")

	for name, form := range map[string]url.Values{
		"no token":    {"action": {"clear"}},
		"wrong token": {"action": {"clear"}, "csrf": {"not-the-token-at-all"}},
	} {
		resp, err := c.PostForm(b.srv.URL+"/queues/default", form)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusForbidden, resp.StatusCode, name)
		require.EqualValues(t, 1, b.queueSize(t), name)
	}
	// Another site's page can post the right field value only if it knows
	// it; without the cookie (a fresh client) even the right value fails.
	resp, err := client(t).PostForm(b.srv.URL+"/queues/default", url.Values{"action": {"clear"}, "csrf": {m[1]}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	resp, err = c.PostForm(b.srv.URL+"/queues/default", url.Values{"action": {"clear"}, "csrf": {m[1]}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.EqualValues(t, 0, b.queueSize(t))
}

func TestReadOnlyHidesAndRefusesMutations(t *testing.T) {
	t.Parallel()
	b := guardSetup(t, &web.Config{ReadOnly: true})
	c := client(t)
	code, page := get(t, c, b.srv.URL+"/queues")
	require.Equal(t, 200, code)
	require.Contains(t, page, "read-only")
	require.NotContains(t, page, "<button", "no buttons")
	m := csrfRe.FindStringSubmatch(page)
	require.Nil(t, m, "no forms")
	code, _ = get(t, c, b.srv.URL+"/") // sets the CSRF cookie
	require.Equal(t, 200, code)
	var tok string
	for _, ck := range c.Jar.Cookies(mustURL(t, b.srv.URL)) {
		if ck.Name == "gojob_csrf" {
			tok = ck.Value
		}
	}
	require.NotEmpty(t, tok)
	resp, err := c.PostForm(b.srv.URL+"/queues/default", url.Values{"action": {"clear"}, "csrf": {tok}})
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, string(body), "read-only")
	require.EqualValues(t, 1, b.queueSize(t))
}

func mustURL(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	require.NoError(t, err)
	return u
}

func TestBasicAuthAndTokenGuardEveryPage(t *testing.T) {
	t.Parallel()
	b := guardSetup(t, &web.Config{BasicAuth: "ops:s3cret", Token: "tok-123"})
	for _, p := range []string{"/", "/retries", "/metrics", "/static/app.css", "/stats.json"} {
		code, _ := get(t, client(t), b.srv.URL+p)
		require.Equal(t, http.StatusUnauthorized, code, p)
	}
	req, _ := http.NewRequest("GET", b.srv.URL+"/", nil)
	req.SetBasicAuth("ops", "wrong")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Contains(t, resp.Header.Get("WWW-Authenticate"), "Basic")

	req.SetBasicAuth("ops", "s3cret")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	req, _ = http.NewRequest("GET", b.srv.URL+"/busy", nil)
	req.Header.Set("Authorization", "Bearer tok-123")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// The printed ?token= URL sets a cookie (not the token itself) and
	// drops the token from the address.
	c := client(t)
	resp, err = c.Get(b.srv.URL + "/retries?token=tok-123")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/retries", resp.Header.Get("Location"))
	for _, ck := range c.Jar.Cookies(mustURL(t, b.srv.URL)) {
		require.NotContains(t, ck.Value, "tok-123")
	}
	code, _ := get(t, c, b.srv.URL+"/retries")
	require.Equal(t, http.StatusOK, code)
	code, _ = get(t, client(t), b.srv.URL+"/retries?token=wrong")
	require.Equal(t, http.StatusUnauthorized, code)
}

func TestMetricsServesTheClusterGauges(t *testing.T) {
	t.Parallel()
	b := guardSetup(t, &web.Config{})
	code, body := get(t, client(t), b.srv.URL+"/metrics")
	require.Equal(t, 200, code)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err)
	q := fams["gojob_queue_size"]
	require.NotNil(t, q, body)
	require.Equal(t, "default", q.Metric[0].Label[0].GetValue())
	require.Equal(t, 1.0, q.Metric[0].Gauge.GetValue())
	require.Equal(t, 0.0, fams["gojob_cluster_scrape_error"].Metric[0].Gauge.GetValue())
}
