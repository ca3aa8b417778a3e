package web_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/orderedstore"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/ordered"
	"github.com/gojob/gojob/sidekiq/wire"
	"github.com/gojob/gojob/web"
)

// buryOrders fills ordered queue "orders" with a morgue of keys (each with
// one payload) through a real worker whose handler fails everything, then
// stops the worker so nothing runs the requeued payloads.
func buryOrders(t *testing.T, pool *redis.Pool, keys ...string) {
	t.Helper()
	ctx := context.Background()
	ow, err := ordered.NewWorker(&ordered.Config{
		Pool: pool, Queue: "orders", Shards: 2, MaxRetryCount: 1, PollInterval: 10 * time.Millisecond,
		RetryIn: func(int) time.Duration { return 0 },
		Handler: ordered.HandlerFunc(func(context.Context, *ordered.Batch) error { return errors.New("refused") }),
	})
	require.NoError(t, err)
	require.NoError(t, ow.Start(ctx))
	oc, err := ordered.NewClient(&ordered.ClientConfig{Pool: pool})
	require.NoError(t, err)
	for i, k := range keys {
		j, err := wire.NewJob("SyncOrder", i)
		require.NoError(t, err)
		j.SetQueue("orders")
		_, err = oc.Push(ctx, j, &ordered.PushOpts{Key: k})
		require.NoError(t, err)
	}
	wait.Within(t, 10*time.Second, "every key in the morgue", func() bool {
		st, err := orderedstore.Status(ctx, pool, "orders", time.Now())
		return err == nil && st.MorgueKeys == len(keys)
	})
	require.NoError(t, ow.Stop(ctx))
}

func orderedServer(t *testing.T, cfg *web.Config, keys ...string) (*redis.Pool, *httptest.Server) {
	t.Helper()
	pool := redistest.Start(t).Pool(t)
	buryOrders(t, pool, keys...)
	cfg.Pool = pool
	h, err := web.New(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return pool, srv
}

func TestOrderedRequeueButtonMovesTheMorgueEntryBack(t *testing.T) {
	t.Parallel()
	pool, srv := orderedServer(t, &web.Config{}, "order-1", "order-2", "order-3")
	ctx := context.Background()
	c := client(t)
	code, page := get(t, c, srv.URL+"/ordered/orders")
	require.Equal(t, 200, code)
	require.Contains(t, page, "order-1")
	require.Contains(t, page, "refused")
	m := csrfRe.FindStringSubmatch(page)
	require.NotNil(t, m, "the morgue's forms carry the CSRF token")

	post := func(form url.Values) *http.Response {
		t.Helper()
		resp, err := c.PostForm(srv.URL+"/ordered/orders", form)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	// Without the token nothing moves.
	resp := post(url.Values{"action": {"requeue"}, "key": {"order-1"}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	ks, err := orderedstore.Key(ctx, pool, "orders", "order-1")
	require.NoError(t, err)
	require.Len(t, ks.Morgue, 1)

	// Requeue, as the entry's button posts it.
	resp = post(url.Values{"action": {"requeue"}, "key": {"order-1"}, "csrf": {m[1]}, "back": {"/ordered/orders"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	ks, err = orderedstore.Key(ctx, pool, "orders", "order-1")
	require.NoError(t, err)
	require.Empty(t, ks.Morgue)
	require.Len(t, ks.Payloads, 1, "back in the key's queue")
	require.True(t, ks.Queued)
	require.Equal(t, -1, ks.RetryCount)

	code, page = get(t, c, srv.URL+resp.Header.Get("Location"))
	require.Equal(t, 200, code)
	require.Contains(t, page, "requeued 1 payload of key order-1 from the morgue")
	require.NotContains(t, page, `value="order-1"`)

	// Delete one, then requeue all.
	resp = post(url.Values{"action": {"delete"}, "key": {"order-2"}, "csrf": {m[1]}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	ks, err = orderedstore.Key(ctx, pool, "orders", "order-2")
	require.NoError(t, err)
	require.Empty(t, ks.Morgue)
	require.Empty(t, ks.Payloads)
	resp = post(url.Values{"action": {"requeue"}, "all": {"1"}, "csrf": {m[1]}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	st, err := orderedstore.Status(ctx, pool, "orders", time.Now())
	require.NoError(t, err)
	require.Equal(t, 0, st.MorgueKeys)
	require.EqualValues(t, 2, st.Pending)

	code, page = get(t, c, srv.URL+"/ordered")
	require.Equal(t, 200, code)
	require.Contains(t, page, `href="/ordered/orders"`)
	code, _ = get(t, c, srv.URL+"/ordered/nope")
	require.Equal(t, http.StatusNotFound, code)
}

func TestOrderedPageReadOnlyHidesAndRefusesMorgueButtons(t *testing.T) {
	t.Parallel()
	pool, srv := orderedServer(t, &web.Config{ReadOnly: true}, "order-1")
	c := client(t)
	code, page := get(t, c, srv.URL+"/ordered/orders")
	require.Equal(t, 200, code)
	require.Contains(t, page, "order-1")
	require.NotContains(t, page, "<button")
	var tok string
	for _, ck := range c.Jar.Cookies(mustURL(t, srv.URL)) {
		if ck.Name == "gojob_csrf" {
			tok = ck.Value
		}
	}
	require.NotEmpty(t, tok)
	resp, err := c.PostForm(srv.URL+"/ordered/orders", url.Values{"action": {"requeue"}, "all": {"1"}, "csrf": {tok}})
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, string(body), "read-only")
	st, err := orderedstore.Status(context.Background(), pool, "orders", time.Now())
	require.NoError(t, err)
	require.Equal(t, 1, st.MorgueKeys)
}
