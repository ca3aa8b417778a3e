package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/batch"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/jobctl"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
	"github.com/gojob/gojob/web"
)

func plainServer(t *testing.T) (*redis.Pool, *httptest.Server) {
	t.Helper()
	pool := redistest.Start(t).Pool(t)
	h, err := web.New(&web.Config{Pool: pool})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return pool, srv
}

// The Batches page lists a batch with its progress; its page shows its
// counts and callbacks.
func TestBatchesPageShowsProgress(t *testing.T) {
	t.Parallel()
	pool, srv := plainServer(t)
	ctx := context.Background()
	sc, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool})
	require.NoError(t, err)
	b, err := batch.New(&batch.Config{Client: sc})
	require.NoError(t, err)
	st, err := b.Create(ctx, &batch.CreateParams{Description: "nightly import", OnSuccess: "ImportDone"})
	require.NoError(t, err)
	// One job in a queue a worker runs, three in one nobody runs.
	for i, q := range []string{"import", "later", "later", "later"} {
		job, err := wire.NewJob("ImportPart", i)
		require.NoError(t, err)
		job.SetQueue(q)
		_, _, err = b.Push(ctx, st.BID, job)
		require.NoError(t, err)
	}
	w, err := sidekiq.NewServer(&sidekiq.ServerConfig{Pool: pool, Concurrency: 1, Logger: zerolog.Nop(),
		Queues: []wire.QueueWeight{{Name: "import"}}, Extensions: []sidekiq.Extension{b}})
	require.NoError(t, err)
	w.HandleFunc("ImportPart", func(context.Context, *wire.Job) error { return nil })
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w.Stop(ctx)
	})
	wait.For(t, "one success", func() bool {
		got, err := b.Status(ctx, st.BID)
		require.NoError(t, err)
		return got.Succeeded == 1
	})

	c := client(t)
	code, page := get(t, c, srv.URL+"/batches")
	require.Equal(t, 200, code)
	require.Contains(t, page, `href="/batches/`+st.BID+`"`)
	require.Contains(t, page, "nightly import")
	require.Contains(t, page, `value="25"`, "1 of 4 done")
	code, page = get(t, c, srv.URL+"/batches/"+st.BID)
	require.Equal(t, 200, code)
	require.Contains(t, page, "ImportDone")
	require.Contains(t, page, "3 pending")
	require.Contains(t, page, "gojob batch seal")
	code, _ = get(t, c, srv.URL+"/batches/nosuchbatch")
	require.Equal(t, http.StatusNotFound, code)
}

// The job page shows a job's status and result; its Cancel button removes
// a waiting job.
func TestJobPageShowsStatusAndCancels(t *testing.T) {
	t.Parallel()
	pool, srv := plainServer(t)
	ctx := context.Background()
	sc, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool})
	require.NoError(t, err)
	res, err := sc.Enqueue(ctx, "default", "Export")
	require.NoError(t, err)
	p := 0.4
	require.NoError(t, jobctl.WriteStatus(ctx, pool, res.JID, &jobctl.Status{Progress: &p, Message: "40 of 100 files",
		Result: json.RawMessage(`{"rows":12}`)}, time.Now()))
	c := client(t)
	code, page := get(t, c, srv.URL+"/jobs/"+res.JID)
	require.Equal(t, 200, code)
	require.Contains(t, page, "40 of 100 files")
	require.Contains(t, page, "&#34;rows&#34;: 12")
	require.Contains(t, page, `<b>enqueued</b> in <a href="/queues/default">default</a>`)
	m := csrfRe.FindStringSubmatch(page)
	require.NotNil(t, m)
	resp, err := c.PostForm(srv.URL+"/jobs/"+res.JID+"/cancel", url.Values{"csrf": {m[1]}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	conn := pool.Get()
	defer conn.Close()
	n, err := redis.Int(conn.Do("LLEN", "queue:default"))
	require.NoError(t, err)
	require.Zero(t, n, "cancelled: removed from its queue")
	// Gone from Redis but for its status: the page says so, under no tab.
	code, page = get(t, c, srv.URL+"/jobs/"+res.JID)
	require.Equal(t, 200, code)
	require.Contains(t, page, "no longer in Redis")
	require.Contains(t, page, "40 of 100 files")
	require.NotContains(t, page, `class="on"`)
	code, _ = get(t, c, srv.URL+"/jobs/ffffffffffffffffffffffff")
	require.Equal(t, http.StatusNotFound, code)
}
