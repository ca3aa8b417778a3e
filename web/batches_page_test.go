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
	"github.com/gojob/gojob/sidekiq/rubyjson"
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
	w.Handle("ImportPart", sidekiq.HandlerFunc(func(context.Context, *wire.Job) error { return nil }), nil)
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

// /batches/BID lists the batch's dead and pending jobs with where they are
// and their errors, each linking to its entry.
func TestBatchPageListsPendingAndDeadJobs(t *testing.T) {
	t.Parallel()
	pool, srv := plainServer(t)
	ctx := context.Background()
	sc, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool})
	require.NoError(t, err)
	b, err := batch.New(&batch.Config{Client: sc})
	require.NoError(t, err)
	st, err := b.Create(ctx, &batch.CreateParams{OnComplete: "Finished"})
	require.NoError(t, err)
	jids := map[string]string{}
	for _, class := range []string{"Queued", "Failing", "Died"} {
		job, err := wire.NewJob(class, 1)
		require.NoError(t, err)
		job.SetQueue("import")
		jid, _, err := b.Push(ctx, st.BID, job)
		require.NoError(t, err)
		jids[class] = jid
	}
	require.NoError(t, b.Seal(ctx, st.BID))
	conn := pool.Get()
	defer conn.Close()
	now := time.Now()
	for class, set := range map[string]string{"Failing": "retry", "Died": "dead"} {
		raw, err := redis.Strings(conn.Do("LRANGE", "queue:import", 0, -1))
		require.NoError(t, err)
		for _, p := range raw {
			j, err := wire.ParseJob([]byte(p))
			require.NoError(t, err)
			if j.JID() != jids[class] {
				continue
			}
			_, err = conn.Do("LREM", "queue:import", 1, p)
			require.NoError(t, err)
			j.Set("error_class", rubyjson.StringValue("Net::ReadTimeout"))
			j.Set("error_message", rubyjson.StringValue(class+" <because>"))
			score := now.Add(time.Hour).Unix()
			if set == "dead" {
				score = now.Add(-time.Minute).Unix()
			}
			_, err = conn.Do("ZADD", set, score, j.Bytes())
			require.NoError(t, err)
		}
	}

	c := &http.Client{}
	code, page := get(t, c, srv.URL+"/batches/"+url.PathEscape(st.BID))
	require.Equal(t, 200, code, page)
	require.Contains(t, page, "Dead jobs <small>1</small>")
	require.Contains(t, page, "Pending jobs <small>2</small>")
	require.Regexp(t, `<b>Died</b><div class="muted small"><a href="/jobs/`+jids["Died"]+`">`, page)
	require.Regexp(t, `<a href="/dead/[\d.]+-`+jids["Died"]+`">dead set</a>, died`, page)
	require.Regexp(t, `<a href="/retries/[\d.]+-`+jids["Failing"]+`">retry set</a>, next`, page)
	require.Contains(t, page, "<b>Net::ReadTimeout</b> Died &lt;because&gt;")
	require.Contains(t, page, "Failing &lt;because&gt;")
	require.Contains(t, page, "queued or running")
}
