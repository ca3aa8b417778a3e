package web_test

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/wire"
)

// navOn is the highlighted navigation tab.
var navOn = regexp.MustCompile(`<a href="[^"]*" class="on">([A-Za-z]+)`)

// A gojob process writing for every reader (both work-hash layouts)
// runs one job: the Busy page shows it in one row, and its job page
// says where it runs, under the Busy tab, with Cancel.
func TestBusyPageShowsARunningJobOnceAndItsPage(t *testing.T) {
	t.Parallel()
	pool, srv := plainServer(t)
	ctx := context.Background()
	release := make(chan struct{})
	w, err := sidekiq.NewServer(&sidekiq.ServerConfig{Pool: pool, Concurrency: 2, Logger: zerolog.Nop(),
		FollowVersion: true, Fetch: "reliable", HeartbeatInterval: 100 * time.Millisecond,
		Queues: []wire.QueueWeight{{Name: "default"}}})
	require.NoError(t, err)
	w.Handle("Quiet", sidekiq.HandlerFunc(func(ctx context.Context, _ *wire.Job) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}), nil)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		close(release)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w.Stop(ctx)
	})
	sc, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool})
	require.NoError(t, err)
	res, err := sc.Enqueue(ctx, "default", "Quiet", "x")
	require.NoError(t, err)
	conn := pool.Get()
	defer conn.Close()
	wait.For(t, "both work-hash layouts to show the job", func() bool {
		for _, suffix := range []string{":work", ":workers"} {
			vals, _ := redis.Strings(conn.Do("HVALS", w.Identity()+suffix))
			if len(vals) != 1 || !strings.Contains(vals[0], res.JID) {
				return false
			}
		}
		return true
	})

	c := client(t)
	code, page := get(t, c, srv.URL+"/busy")
	require.Equal(t, 200, code)
	require.Equal(t, 1, strings.Count(page, `href="/jobs/`+res.JID+`"`), "one row")
	require.Contains(t, page, "Jobs running <small>1</small>")

	code, page = get(t, c, srv.URL+"/jobs/"+res.JID)
	require.Equal(t, 200, code)
	require.Contains(t, page, "<b>running</b> on")
	require.Contains(t, page, w.Identity())
	require.Contains(t, page, " UTC (")
	require.Contains(t, page, ">Cancel</button>")
	require.Equal(t, "Busy", navOn.FindStringSubmatch(page)[1])
	require.NotContains(t, page, ">Retry now</button>")
}

// An ActiveJob mailer in the retry set reads as its mailer on the
// Retries page, its entry page and its job page, which is the entry
// page's twin with where it is; a search finds it by the mailer's name.
func TestActiveJobRetryShowsItsMailer(t *testing.T) {
	t.Parallel()
	pool, srv := plainServer(t)
	ctx := context.Background()
	a, err := api.New(&api.Config{Pool: pool})
	require.NoError(t, err)
	raw, err := os.ReadFile("../testdata/activejob/mailer-retry.json")
	require.NoError(t, err)
	job, err := wire.ParseJob(bytes.TrimSpace(raw))
	require.NoError(t, err)
	at := time.Now().Add(10 * time.Minute)
	require.NoError(t, a.RetrySet().Schedule(ctx, at, job))
	e, err := a.RetrySet().FindJob(ctx, job.JID())
	require.NoError(t, err)

	c := client(t)
	code, page := get(t, c, srv.URL+"/retries")
	require.Equal(t, 200, code)
	require.Contains(t, page, "<b>UserMailer#welcome</b>")
	require.NotContains(t, page, "<b>ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper</b>")
	require.Contains(t, page, "gid://app/User/7")
	for _, q := range []string{"UserMailer", "UserMailer#welcome", "ActionMailer::MailDeliveryJob"} {
		code, page = get(t, c, srv.URL+"/retries?q="+url.QueryEscape(q))
		require.Equal(t, 200, code)
		require.Contains(t, page, "<b>UserMailer#welcome</b>", q)
	}
	code, page = get(t, c, srv.URL+"/retries?q="+url.QueryEscape("UserMailer#goodbye"))
	require.Equal(t, 200, code)
	require.NotContains(t, page, "<b>UserMailer#welcome</b>")

	for _, path := range []string{"/retries/" + url.PathEscape(contract.FormatScore(e.Score)+"-"+job.JID()), "/jobs/" + job.JID()} {
		code, page = get(t, c, srv.URL+path)
		require.Equal(t, http.StatusOK, code, path)
		require.Contains(t, page, "<b>UserMailer#welcome</b>", path)
		require.Contains(t, page, "1b6f3c9e-4d0a-4c8e-9d5e-2f1a7b3c4d5e", path, "the ActiveJob id")
		require.Contains(t, page, "Net::SMTPServerBusy", path)
		require.Contains(t, page, "waiting to be retried", path)
		require.Contains(t, page, "Next retry", path)
		require.Contains(t, page, ">Retry now</button>", path)
		require.Contains(t, page, ">Kill</button>", path)
		require.NotContains(t, page, ">Cancel</button>", path)
		require.Equal(t, "Retries", navOn.FindStringSubmatch(page)[1], path)
	}
	// The job page's actions act on the entry.
	m := csrfRe.FindStringSubmatch(page)
	require.NotNil(t, m)
	resp, err := c.PostForm(srv.URL+"/retries/"+url.PathEscape(contract.FormatScore(e.Score)+"-"+job.JID()),
		url.Values{"csrf": {m[1]}, "action": {"kill"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	code, page = get(t, c, srv.URL+"/jobs/"+job.JID())
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "Dead", navOn.FindStringSubmatch(page)[1])
	require.Contains(t, page, "<b>dead</b>")
}
