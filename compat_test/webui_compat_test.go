package compat_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/rubytest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// uiRow is one <tr> of a Web UI table: its HTML and the text of its cells.
type uiRow struct {
	html  string
	cells []string
}

var (
	uiTrRe       = regexp.MustCompile(`(?s)<tr[^>]*>(.*?)</tr>`)
	uiTdRe       = regexp.MustCompile(`(?s)<td[^>]*>(.*?)</td>`)
	uiTagRe      = regexp.MustCompile(`(?s)<[^>]*>`)
	uiIdentityRe = regexp.MustCompile(`name="identity" value="([^"]*)"`)
	uiKeyRe      = regexp.MustCompile(`name='key\[\]' value='([^']*)'`)
	uiTimeRe     = regexp.MustCompile(`datetime="([^"]*)"`)
)

// uiText is the text of an HTML fragment: tags removed, entities decoded,
// white space collapsed.
func uiText(s string) string {
	return strings.Join(strings.Fields(html.UnescapeString(uiTagRe.ReplaceAllString(s, " "))), " ")
}

// uiTable returns the body rows (rows with <td> cells) of the first table
// whose class attribute starts with class.
func uiTable(t *testing.T, page, class string) []uiRow {
	t.Helper()
	start := strings.Index(page, `<table class="`+class)
	require.NotEqual(t, -1, start, "no table %q in the page", class)
	end := strings.Index(page[start:], "</table>")
	require.NotEqual(t, -1, end)
	var rows []uiRow
	for _, tr := range uiTrRe.FindAllStringSubmatch(page[start:start+end], -1) {
		tds := uiTdRe.FindAllStringSubmatch(tr[1], -1)
		if len(tds) == 0 {
			continue
		}
		r := uiRow{html: tr[1]}
		for _, td := range tds {
			r.cells = append(r.cells, uiText(td[1]))
		}
		rows = append(rows, r)
	}
	return rows
}

// uiProcessRow finds the Busy page's process row of identity (the hidden
// identity field of its Quiet/Stop form).
func uiProcessRow(rows []uiRow, identity string) (uiRow, bool) {
	for _, r := range rows {
		if m := uiIdentityRe.FindStringSubmatch(r.html); m != nil && html.UnescapeString(m[1]) == identity {
			return r, true
		}
	}
	return uiRow{}, false
}

// uiWorkerRow finds the Busy page's job row of a process.
func uiWorkerRow(rows []uiRow, identity string) (uiRow, bool) {
	for _, r := range rows {
		if len(r.cells) > 0 && r.cells[0] == identity {
			return r, true
		}
	}
	return uiRow{}, false
}

// uiStat reads a number from the stats bar of the Busy page.
func uiStat(t *testing.T, page, label string) string {
	t.Helper()
	m := regexp.MustCompile(`<h3>([^<]*)</h3>\s*<p>` + regexp.QuoteMeta(label) + `</p>`).FindStringSubmatch(page)
	require.NotNil(t, m, "no %q stat on the page", label)
	return strings.TrimSpace(m[1])
}

// uiEntryKey returns the "<score>-<jid>" key of a Retries/Dead row.
func uiEntryKey(t *testing.T, r uiRow) (key, jid string) {
	t.Helper()
	m := uiKeyRe.FindStringSubmatch(r.html)
	require.NotNil(t, m, "row has no key checkbox: %s", r.html)
	key = html.UnescapeString(m[1])
	_, jid, ok := strings.Cut(key, "-")
	require.True(t, ok, key)
	return key, jid
}

// uiStats is the /stats JSON of the Dashboard.
type uiStats struct {
	Sidekiq struct {
		Processed      int64   `json:"processed"`
		Failed         int64   `json:"failed"`
		Busy           int64   `json:"busy"`
		Processes      int64   `json:"processes"`
		Enqueued       int64   `json:"enqueued"`
		Scheduled      int64   `json:"scheduled"`
		Retries        int64   `json:"retries"`
		Dead           int64   `json:"dead"`
		DefaultLatency float64 `json:"default_latency"`
	} `json:"sidekiq"`
}

func uiGetStats(t *testing.T, ui *rubytest.WebUI) uiStats {
	t.Helper()
	var s uiStats
	body := ui.Get(t, "/stats")
	require.NoError(t, json.Unmarshal([]byte(body), &s), body)
	return s
}

// uiPush pushes one job built by the test.
func uiPush(t *testing.T, e *env, queue, class string, retry any, args ...any) string {
	t.Helper()
	job, err := wire.NewJob(class, args...)
	require.NoError(t, err)
	job.SetQueue(queue)
	if retry != nil {
		v, err := rubyjson.FromGo(retry)
		require.NoError(t, err)
		job.Set("retry", v)
	}
	res, err := e.client.Push(context.Background(), job, nil)
	require.NoError(t, err)
	return res.JID
}

// uiBusyWorker is a Ruby job that runs until the key sv:release exists.
const uiBusyWorker = `
Redis.silence_deprecations = true
class SvRubyBlockJob
  include Sidekiq::Worker
  def perform(arg)
    600.times do
      break if Sidekiq.redis { |c| c.exists?("sv:release") }
      sleep 0.05
    end
  end
end
`

// A gojob server and a Ruby Sidekiq process on one Redis both appear on
// the 6.4.1 Busy page, each with its hostname:pid, tag, labels, queues,
// threads and busy count, and each one's running job with its jid, queue,
// class, args and start time.
func TestWebUICompatBusyShowsGojobAndRuby(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	started := make(chan string, 1)
	release := make(chan struct{})
	srv := svServer(t, e, sidekiq.ServerConfig{
		Queues: []wire.QueueWeight{{Name: "svbusy"}}, Concurrency: 3, DisablePoller: true,
		Tag: "gojob-busy", Labels: []string{"go-label"},
	}, func(s *sidekiq.Server) {
		s.Handle("SvBlockJob", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
			started <- job.JID()
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}), nil)
	})
	t.Cleanup(func() { close(release) })
	ruby := svRubySidekiq(t, e, uiBusyWorker, "-q", "svruby", "-c", "2", "-g", "rubytag")
	t.Cleanup(func() { e.do(t, "SET", "sv:release", "1") })
	ui := rubytest.StartWebUI(t, e.srv.URL())

	goJID := uiPush(t, e, "svbusy", "SvBlockJob", nil, 42, "héllo <b>")
	rubyJID := uiPush(t, e, "svruby", "SvRubyBlockJob", nil, "ruby-arg")
	select {
	case jid := <-started:
		require.Equal(t, goJID, jid)
	case <-time.After(10 * time.Second):
		t.Fatal("gojob did not start the job")
	}
	goWork := contract.WorkKey(srv.Identity(), wire.Version6)
	rubyWork := ruby.identity + ":workers"
	wait.Within(t, 15*time.Second, "both running jobs in the work hashes", func() bool {
		return svInt(t, e, "HLEN", goWork) == 1 && svInt(t, e, "HLEN", rubyWork) == 1
	})

	page := ui.Get(t, "/busy")
	host, err := os.Hostname()
	require.NoError(t, err)
	require.Equal(t, "2", uiStat(t, page, "Processes"))
	require.Equal(t, "5", uiStat(t, page, "Threads"))
	require.Equal(t, "2", uiStat(t, page, "Busy"))

	procs := uiTable(t, page, "processes")
	require.Len(t, procs, 2)
	goRow, ok := uiProcessRow(procs, srv.Identity())
	require.True(t, ok, "gojob is not on the Busy page")
	require.Equal(t, fmt.Sprintf("%s:%d gojob-busy go-label Queues: svbusy", host, os.Getpid()), goRow.cells[0])
	require.Equal(t, []string{"3", "1"}, goRow.cells[3:5], "threads, busy")
	require.NotContains(t, goRow.html, ">quiet<")
	require.Contains(t, goRow.html, `name="quiet"`)
	rubyRow, ok := uiProcessRow(procs, ruby.identity)
	require.True(t, ok, "the Ruby process is not on the Busy page")
	require.Equal(t, fmt.Sprintf("%s:%d rubytag Queues: svruby", host, ruby.pid), rubyRow.cells[0])
	require.Equal(t, []string{"2", "1"}, rubyRow.cells[3:5], "threads, busy")
	for _, r := range []uiRow{goRow, rubyRow} {
		require.NotEqual(t, "0 KB", r.cells[2], "rss")
		m := uiTimeRe.FindStringSubmatch(r.html)
		require.NotNil(t, m)
		startedAt, err := time.Parse(time.RFC3339, m[1])
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), startedAt, time.Minute, "started_at")
	}

	jobs := uiTable(t, page, "workers")
	require.Len(t, jobs, 2)
	w, ok := uiWorkerRow(jobs, srv.Identity())
	require.True(t, ok, "gojob's running job is not on the Busy page")
	require.Equal(t, []string{goJID, "svbusy", "SvBlockJob", `42, "héllo <b>"`}, w.cells[2:6])
	require.NotEmpty(t, w.cells[1], "tid")
	m := uiTimeRe.FindStringSubmatch(w.html)
	require.NotNil(t, m)
	runAt, err := time.Parse(time.RFC3339, m[1])
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), runAt, time.Minute, "run_at")
	w, ok = uiWorkerRow(jobs, ruby.identity)
	require.True(t, ok, "Ruby's running job is not on the Busy page")
	require.Equal(t, []string{rubyJID, "svruby", "SvRubyBlockJob", `"ruby-arg"`}, w.cells[2:6])
}

// A gojob alone in a Redis that shows no Sidekiq version (FollowVersion,
// the default of gojob work) writes for every Web UI: the 6.4.1 Busy page
// shows it and its running job (from <id>:workers, which it writes beside
// the 6.4.2+ <id>:work), with its thread count.
func TestWebUICompatBusyShowsAGojobAloneWritingForAllReaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	started := make(chan string, 1)
	release := make(chan struct{})
	srv := svServer(t, e, sidekiq.ServerConfig{
		Queues: []wire.QueueWeight{{Name: "svalone"}}, Concurrency: 3, DisablePoller: true, FollowVersion: true,
	}, func(s *sidekiq.Server) {
		s.Handle("SvAloneJob", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
			started <- job.JID()
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}), nil)
	})
	t.Cleanup(func() { close(release) })
	require.Equal(t, wire.Version7, srv.Client().Version(), "the format every reader shows")
	ui := rubytest.StartWebUI(t, e.srv.URL())
	jid := uiPush(t, e, "svalone", "SvAloneJob", nil, 7)
	select {
	case got := <-started:
		require.Equal(t, jid, got)
	case <-time.After(10 * time.Second):
		t.Fatal("gojob did not start the job")
	}
	wait.Within(t, 15*time.Second, "the running job in both work hashes", func() bool {
		return svInt(t, e, "HLEN", srv.Identity()+":workers") == 1 && svInt(t, e, "HLEN", srv.Identity()+":work") == 1
	})
	page := ui.Get(t, "/busy")
	require.Equal(t, "1", uiStat(t, page, "Processes"))
	require.Equal(t, "3", uiStat(t, page, "Threads"))
	require.Equal(t, "1", uiStat(t, page, "Busy"))
	row, ok := uiProcessRow(uiTable(t, page, "processes"), srv.Identity())
	require.True(t, ok, "gojob is not on the Busy page")
	require.Equal(t, []string{"3", "1"}, row.cells[3:5], "threads, busy")
	w, ok := uiWorkerRow(uiTable(t, page, "workers"), srv.Identity())
	require.True(t, ok, "gojob's running job is not on the 6.4.1 Busy page")
	require.Equal(t, []string{jid, "svalone", "SvAloneJob", "7"}, w.cells[2:6])
}

// Quiet and Stop posted as the Busy page posts them (identity, quiet/stop
// and the page's CSRF token) quiet and then stop a gojob server.
func TestWebUICompatQuietAndStop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var ran atomic.Int32
	signals := make(chan string, 4)
	srv := svNewServer(t, e, sidekiq.ServerConfig{
		Queues: []wire.QueueWeight{{Name: "svquiet"}}, Concurrency: 2,
		OnSignal: func(sig string) { signals <- sig },
	}, func(s *sidekiq.Server) {
		s.Handle("SvQuietJob", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
			ran.Add(1)
			return nil
		}), nil)
	})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		errc <- srv.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-stopped:
		case <-time.After(15 * time.Second):
			t.Error("server did not stop")
		}
	})
	id := srv.Identity()
	wait.Within(t, 10*time.Second, "gojob to register", func() bool {
		return svInt(t, e, "SISMEMBER", contract.KeyProcesses, id) == 1
	})
	ui := rubytest.StartWebUI(t, e.srv.URL())
	nextSignal := func() string {
		t.Helper()
		select {
		case s := <-signals:
			return s
		case <-time.After(10 * time.Second):
			t.Fatal("no signal reached the server")
			return ""
		}
	}

	// The UI's CSRF protection is active: a POST without a valid token is
	// refused and signals nothing.
	status, _, err := ui.Do(context.Background(), http.MethodPost, "/busy",
		url.Values{"authenticity_token": {"bm90IGEgdG9rZW4="}, "identity": {id}, "quiet": {"1"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, status)
	require.Zero(t, svInt(t, e, "LLEN", contract.SignalsKey(id)))

	page := ui.Get(t, "/busy")
	row, ok := uiProcessRow(uiTable(t, page, "processes"), id)
	require.True(t, ok)
	require.Contains(t, row.html, `name="quiet"`, "the Quiet button")
	ui.Post(t, page, "/busy", url.Values{"identity": {id}, "quiet": {"1"}})
	require.Equal(t, "TSTP", nextSignal())
	require.True(t, srv.Status().Quiet)
	wait.Within(t, 10*time.Second, `quiet = "true" in the process hash`, func() bool {
		q, _ := redis.String(e.do(t, "HGET", id, "quiet"), nil)
		return q == "true"
	})
	page = ui.Get(t, "/busy")
	row, ok = uiProcessRow(uiTable(t, page, "processes"), id)
	require.True(t, ok)
	require.Contains(t, row.html, `<span class="label label-danger">quiet</span>`)
	require.NotContains(t, row.html, `name="quiet"`, "a quiet process has no Quiet button")

	// A quiet server takes no new work.
	uiPush(t, e, "svquiet", "SvQuietJob", nil)

	ui.Post(t, page, "/busy", url.Values{"identity": {id}, "stop": {"1"}})
	require.Equal(t, "TERM", nextSignal())
	select {
	case err := <-errc:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after Stop")
	}
	require.Zero(t, svInt(t, e, "SISMEMBER", contract.KeyProcesses, id))
	require.Zero(t, svInt(t, e, "EXISTS", contract.WorkKey(id, wire.Version6)))
	page = ui.Get(t, "/busy")
	_, ok = uiProcessRow(uiTable(t, page, "processes"), id)
	require.False(t, ok, "a stopped server is still on the Busy page")
	require.Equal(t, "0", uiStat(t, page, "Processes"))
	require.Zero(t, ran.Load(), "a quiet server ran a job")
	require.Equal(t, 1, svInt(t, e, "LLEN", contract.QueueKey("svquiet")))
}

// A job that fails in gojob is on the Retries page with its error, and
// "Retry Now" (from the job's own page and from the list's bulk form) runs
// it again in gojob, with retry_count decremented as Ruby's UI does.
func TestWebUICompatRetryNow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mu sync.Mutex
	attempts := map[string]int{}
	rerun := make(chan *wire.Job, 2)
	svServer(t, e, sidekiq.ServerConfig{
		Queues: []wire.QueueWeight{{Name: "svretry"}}, Concurrency: 2, DisablePoller: true,
	}, func(s *sidekiq.Server) {
		s.Handle("SvFlakyJob", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
			mu.Lock()
			attempts[job.JID()]++
			n := attempts[job.JID()]
			mu.Unlock()
			if n == 1 {
				arg, _ := job.Args()[0].Str()
				return sidekiq.WithErrorClass("SvFlakyError", fmt.Errorf("flaky <failure> #%s", arg))
			}
			rerun <- job
			return nil
		}), nil)
	})
	ui := rubytest.StartWebUI(t, e.srv.URL())
	before := contract.EpochSeconds(time.Now())
	jidA := uiPush(t, e, "svretry", "SvFlakyJob", nil, "a")
	jidB := uiPush(t, e, "svretry", "SvFlakyJob", nil, "b")
	wait.Within(t, 10*time.Second, "both failures in the retry set", func() bool {
		return svInt(t, e, "ZCARD", contract.KeyRetry) == 2
	})
	after := contract.EpochSeconds(time.Now())

	page := ui.Get(t, "/retries")
	rows := uiTable(t, page, "table table-striped")
	require.Len(t, rows, 2)
	keys := map[string]string{}
	for _, r := range rows {
		key, jid := uiEntryKey(t, r)
		arg := map[string]string{jidA: "a", jidB: "b"}[jid]
		require.NotEmpty(t, arg, "unknown jid %s", jid)
		keys[arg] = key
		// next retry, retry count, queue, class, args, error
		require.Equal(t, []string{"0", "svretry", "SvFlakyJob", strconv.Quote(arg), "SvFlakyError: flaky <failure> #" + arg}, r.cells[2:7])
		score, err := redis.Float64(e.do(t, "ZSCORE", contract.KeyRetry, svRetryMember(t, e, jid)), nil)
		require.NoError(t, err)
		keyScore, err := strconv.ParseFloat(strings.SplitN(key, "-", 2)[0], 64)
		require.NoError(t, err)
		require.Equal(t, score, keyScore, "the row key carries the retry score")
		// First retry: 15 s + rand(10)*1 s after the failure.
		require.GreaterOrEqual(t, score, before+15)
		require.LessOrEqual(t, score, after+24)
	}

	check := func(jid string) {
		t.Helper()
		select {
		case job := <-rerun:
			require.Equal(t, jid, job.JID())
			n, ok := job.RetryCount()
			require.True(t, ok)
			require.Equal(t, -1, n, "Retry Now decrements retry_count")
			require.Equal(t, "SvFlakyError", job.ErrorClass())
			require.Equal(t, "svretry", job.Queue())
		case <-time.After(10 * time.Second):
			t.Fatalf("job %s did not run again", jid)
		}
	}

	// "Retry Now" on the job's page.
	detail := ui.Get(t, "/retries/"+keys["a"])
	require.Contains(t, detail, `action="/retries/`+keys["a"]+`"`)
	require.Contains(t, detail, "flaky &lt;failure&gt; #a")
	ui.Post(t, detail, "/retries/"+keys["a"], url.Values{"retry": {"Retry Now"}})
	check(jidA)

	// "Retry Now" on the list with the row's checkbox.
	page = ui.Get(t, "/retries")
	require.Len(t, uiTable(t, page, "table table-striped"), 1)
	ui.Post(t, page, "/retries", url.Values{"key[]": {keys["b"]}, "retry": {"Retry Now"}})
	check(jidB)

	require.Zero(t, svInt(t, e, "ZCARD", contract.KeyRetry))
	require.Contains(t, ui.Get(t, "/retries"), "No retries were found")
}

// svRetryMember returns the retry-set member of jid.
func svRetryMember(t *testing.T, e *env, jid string) []byte {
	t.Helper()
	members, err := redis.ByteSlices(e.do(t, "ZRANGE", contract.KeyRetry, 0, -1), nil)
	require.NoError(t, err)
	for _, m := range members {
		job, err := wire.ParseJob(m)
		require.NoError(t, err)
		if job.JID() == jid {
			return m
		}
	}
	t.Fatalf("jid %s is not in the retry set", jid)
	return nil
}

// Jobs that exhaust their retries in gojob (retry: 0 at once, retry: 1 on
// the second failure) are on the Dead page with their errors, and a
// panic's Go stack shows as the backtrace; a retry: false job dies
// without entering the dead set.
func TestWebUICompatDeadPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	deaths := make(chan string, 3)
	svServer(t, e, sidekiq.ServerConfig{
		Queues: []wire.QueueWeight{{Name: "svdead"}}, Concurrency: 2,
		PollIntervalAverage: 100 * time.Millisecond,
		DeathHandlers: []sidekiq.DeathHandler{func(ctx context.Context, job *wire.Job, err error) {
			deaths <- job.JID()
		}},
	}, func(s *sidekiq.Server) {
		s.Handle("SvDoomedJob", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
			switch arg, _ := job.Args()[0].Str(); arg {
			case "A":
				panic("kaboom <A>")
			case "B":
				return sidekiq.WithErrorClass("SvDeadError", errors.New("dies twice"))
			default:
				return errors.New("gone quietly")
			}
		}), nil)
	})
	ui := rubytest.StartWebUI(t, e.srv.URL())

	jobA, err := wire.NewJob("SvDoomedJob", "A")
	require.NoError(t, err)
	jobA.SetQueue("svdead")
	jobA.Set("retry", rubyjson.IntValue(0))
	jobA.Set("backtrace", rubyjson.BoolValue(true))
	resA, err := e.client.Push(context.Background(), jobA, nil)
	require.NoError(t, err)
	jidB := uiPush(t, e, "svdead", "SvDoomedJob", 1, "B")
	jidC := uiPush(t, e, "svdead", "SvDoomedJob", false, "C")

	// B's first failure is a retry 15-25 s ahead: make it due now, as if
	// the time had passed, so gojob's poller enqueues it again.
	wait.Within(t, 10*time.Second, "B in the retry set", func() bool {
		return svInt(t, e, "ZCARD", contract.KeyRetry) == 1
	})
	e.do(t, "ZADD", contract.KeyRetry, "XX", contract.Score(time.Now()), svRetryMember(t, e, jidB))

	died := map[string]bool{}
	for range 3 {
		select {
		case jid := <-deaths:
			died[jid] = true
		case <-time.After(15 * time.Second):
			t.Fatalf("only %d of 3 jobs died", len(died))
		}
	}
	require.Equal(t, map[string]bool{resA.JID: true, jidB: true, jidC: true}, died)
	require.Equal(t, 2, svInt(t, e, "ZCARD", contract.KeyDead))
	require.Zero(t, svInt(t, e, "ZCARD", contract.KeyRetry))

	page := ui.Get(t, "/morgue")
	rows := uiTable(t, page, "table table-striped")
	require.Len(t, rows, 2)
	keys := map[string]string{}
	for _, r := range rows {
		key, jid := uiEntryKey(t, r)
		keys[jid] = key
		// last retry, queue, class, args, error
		switch jid {
		case resA.JID:
			require.Equal(t, []string{"svdead", "SvDoomedJob", `"A"`, "Panic: panic: kaboom <A>"}, r.cells[2:6])
		case jidB:
			require.Equal(t, []string{"svdead", "SvDoomedJob", `"B"`, "SvDeadError: dies twice"}, r.cells[2:6])
		default:
			t.Fatalf("unexpected dead job %s: %v", jid, r.cells)
		}
	}

	detail := ui.Get(t, "/morgue/"+keys[resA.JID])
	require.Contains(t, detail, "kaboom &lt;A&gt;")
	require.Contains(t, detail, "webui_compat_test.go", "the panic's Go stack as the backtrace")
	detail = ui.Get(t, "/morgue/"+keys[jidB])
	require.Contains(t, detail, "dies twice")
	for jid, want := range map[string]int{resA.JID: 0, jidB: 1} {
		raw := svDeadMember(t, e, jid)
		job, err := wire.ParseJob(raw)
		require.NoError(t, err)
		n, _ := job.RetryCount()
		require.Equal(t, want, n, "retry_count of %s", jid)
	}
}

// svDeadMember returns the dead-set member of jid.
func svDeadMember(t *testing.T, e *env, jid string) []byte {
	t.Helper()
	members, err := redis.ByteSlices(e.do(t, "ZRANGE", contract.KeyDead, 0, -1), nil)
	require.NoError(t, err)
	for _, m := range members {
		job, err := wire.ParseJob(m)
		require.NoError(t, err)
		if job.JID() == jid {
			return m
		}
	}
	t.Fatalf("jid %s is not in the dead set", jid)
	return nil
}

// The Dashboard's counters add up after known work: a server that never
// beats after startup flushes its counts at stop; a second one flushes
// them at its heartbeat; /stats and the history chart agree with what ran.
func TestWebUICompatDashboardStats(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var ok atomic.Int32
	register := func(s *sidekiq.Server) {
		s.Handle("SvStatsOK", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
			ok.Add(1)
			return nil
		}), nil)
		s.Handle("SvStatsFail", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
			return errors.New("stats failure")
		}), nil)
	}
	cfg := sidekiq.ServerConfig{
		Queues: []wire.QueueWeight{{Name: "svstats"}}, Concurrency: 4, DisablePoller: true,
	}
	ui := rubytest.StartWebUI(t, e.srv.URL())

	// Server A: its only beat is at startup (before any job).
	cfgA := cfg
	cfgA.HeartbeatInterval = time.Hour
	srvA := svServer(t, e, cfgA, register)
	for i := range 7 {
		uiPush(t, e, "svstats", "SvStatsOK", nil, i)
	}
	for i := range 3 {
		uiPush(t, e, "svstats", "SvStatsFail", nil, i)
	}
	for i := range 2 {
		uiPush(t, e, "svstats", "SvStatsFail", 0, i)
	}
	for i := range 4 {
		uiPush(t, e, "svidle", "SvStatsOK", nil, i)
	}
	for i := range 5 {
		job, err := wire.NewJob("SvStatsOK", i)
		require.NoError(t, err)
		job.SetQueue("svstats")
		_, err = e.client.Push(context.Background(), job, &sidekiq.PushOpts{In: time.Hour})
		require.NoError(t, err)
	}
	wait.Within(t, 10*time.Second, "server A to run its 12 jobs", func() bool {
		return ok.Load() == 7 && svInt(t, e, "ZCARD", contract.KeyRetry) == 3 && svInt(t, e, "ZCARD", contract.KeyDead) == 2
	})
	st := uiGetStats(t, ui).Sidekiq
	require.Zero(t, st.Processed, "nothing is flushed before a beat or the stop")
	require.Zero(t, st.Failed)
	require.EqualValues(t, 1, st.Processes)

	svStop(t, srvA)
	st = uiGetStats(t, ui).Sidekiq
	require.EqualValues(t, 12, st.Processed, "processed counts failures too")
	require.EqualValues(t, 5, st.Failed)
	require.EqualValues(t, 3, st.Retries)
	require.EqualValues(t, 2, st.Dead)
	require.EqualValues(t, 4, st.Enqueued)
	require.EqualValues(t, 5, st.Scheduled)
	require.Zero(t, st.Processes)
	require.Zero(t, st.Busy)

	// Server B beats every 300 ms: its counts show up while it runs.
	svServer(t, e, cfg, register)
	uiPush(t, e, "svstats", "SvStatsOK", nil, 100)
	uiPush(t, e, "svstats", "SvStatsOK", nil, 101)
	uiPush(t, e, "svstats", "SvStatsFail", nil, 102)
	wait.Within(t, 10*time.Second, "the heartbeat to flush server B's counts", func() bool {
		return uiGetStats(t, ui).Sidekiq.Processed == 15
	})
	st = uiGetStats(t, ui).Sidekiq
	require.EqualValues(t, 6, st.Failed)
	require.EqualValues(t, 4, st.Retries)
	require.EqualValues(t, 2, st.Dead)
	require.EqualValues(t, 4, st.Enqueued)
	require.EqualValues(t, 5, st.Scheduled)
	require.EqualValues(t, 1, st.Processes)
	require.Zero(t, st.Busy)
	require.Zero(t, st.DefaultLatency)

	// The Dashboard's history chart reads the daily keys.
	page := ui.Get(t, "/")
	for attr, want := range map[string]int64{"data-processed": 15, "data-failed": 6} {
		m := regexp.MustCompile(`id="history"[^>]*` + attr + `="([^"]*)"`).FindStringSubmatch(page)
		require.NotNil(t, m, attr)
		var days map[string]int64
		require.NoError(t, json.Unmarshal([]byte(html.UnescapeString(m[1])), &days))
		var sum int64
		for _, n := range days {
			sum += n
		}
		require.Equal(t, want, sum, attr)
	}
}
