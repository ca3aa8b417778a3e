package compat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/cron"
	"github.com/gojob/gojob/internal/clocktest"
	"github.com/gojob/gojob/internal/cronschedule"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/rubytest"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

const cronPrelude = `
require "sidekiq-cron"
def tick(name, at)
  Sidekiq::Cron::Job.find(name).test_and_enque_for_time!(Time.at(at).utc)
end
`

// The sidekiq-cron gem 1.8.0 (Debian's, beside Sidekiq 6.4.1) and gojob
// serve one schedule: a job Ruby created is pushed once per tick whichever
// side polls first, and a job gojob saved is valid for the gem, with the
// status, queue, last enqueue and history its Web UI tab shows.
func TestCronScheduleSharedWithTheSidekiqCronGem(t *testing.T) {
	t.Parallel()
	rubytest.Require(t)
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	conn := pool.Get()
	defer conn.Close()
	rubytest.Run(t, rs.URL(), cronPrelude+`
Sidekiq::Cron::Job.create(name: "minutely", cron: "* * * * *", class: "MinuteJob", queue: "cron", args: [1, "a"])
`)
	f := time.Now().UTC().Truncate(time.Minute).Add(10 * time.Minute)
	clk := clocktest.NewFake(f)
	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool, Clock: clk, Version: wire.Version6})
	require.NoError(t, err)
	st := &cron.Store{Client: client, Layout: cron.Layout{V1: true}, Location: time.UTC}
	sch := &cron.Scheduler{Store: st, Logger: zerolog.Nop()}
	ctx := context.Background()

	jobs, err := st.List(ctx)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, "MinuteJob", jobs[0].Class)
	require.Equal(t, "cron", jobs[0].Queue())
	require.True(t, jobs[0].Enabled)

	// Tick f: Ruby polls first, gojob finds the tick claimed.
	rubytest.Run(t, rs.URL(), cronPrelude+fmt.Sprintf(`tick("minutely", %d)`, f.Add(5*time.Second).Unix()))
	clk.Set(f.Add(6 * time.Second))
	n, err := sch.Pass(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "Ruby pushed this tick")
	// Tick f+1m: gojob first, Ruby finds it done.
	clk.Set(f.Add(time.Minute + 5*time.Second))
	n, err = sch.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	rubytest.Run(t, rs.URL(), cronPrelude+fmt.Sprintf(`tick("minutely", %d)`, f.Add(time.Minute+6*time.Second).Unix()))

	raws, err := redis.ByteSlices(conn.Do("LRANGE", "queue:cron", 0, -1))
	require.NoError(t, err)
	require.Len(t, raws, 2, "one push per tick")
	for _, raw := range raws {
		job, err := wire.ParseJob(raw)
		require.NoError(t, err)
		require.Equal(t, "MinuteJob", job.Class())
		require.Equal(t, "cron", job.Queue())
	}
	members, err := redis.Strings(conn.Do("ZRANGE", "cron_job:minutely:enqueued", 0, -1))
	require.NoError(t, err)
	require.Contains(t, members, f.Format("2006-01-02T15:04:05Z"))
	require.Contains(t, members, f.Add(time.Minute).Format("2006-01-02T15:04:05Z"))

	// A job gojob saved, enabled, disabled and pushed, as the gem reads it.
	j, err := cron.NewJob("gojob-made", "*/5 * * * *", "ReportJob", "reports", "daily", 2)
	require.NoError(t, err)
	j.Description = "made in Go"
	require.NoError(t, st.Save(ctx, j))
	require.NoError(t, st.SetEnabled(ctx, "gojob-made", false))
	jid, err := st.RunNow(ctx, "gojob-made")
	require.NoError(t, err)
	out := rubytest.Run(t, rs.URL(), cronPrelude+`
j = Sidekiq::Cron::Job.find("gojob-made")
puts JSON.generate({
  "valid" => j.valid?, "status" => j.status, "queue" => j.instance_variable_get(:@queue),
  "args" => j.args, "description" => j.description, "cron" => j.cron, "klass" => j.klass,
  "last" => j.last_enqueue_time.to_i, "history" => j.jid_history_from_redis,
  "names" => Sidekiq::Cron::Job.all.map(&:name).sort,
})
`)
	var got struct {
		Valid       bool             `json:"valid"`
		Status      string           `json:"status"`
		Queue       string           `json:"queue"`
		Args        []any            `json:"args"`
		Description string           `json:"description"`
		Cron        string           `json:"cron"`
		Klass       string           `json:"klass"`
		Last        int64            `json:"last"`
		History     []map[string]any `json:"history"`
		Names       []string         `json:"names"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &got), out)
	require.True(t, got.Valid)
	require.Equal(t, "disabled", got.Status)
	require.Equal(t, "reports", got.Queue)
	require.Equal(t, []any{"daily", float64(2)}, got.Args)
	require.Equal(t, "made in Go", got.Description)
	require.Equal(t, "*/5 * * * *", got.Cron)
	require.Equal(t, "ReportJob", got.Klass)
	require.Equal(t, clk.Now().Unix(), got.Last)
	require.Len(t, got.History, 1)
	require.Equal(t, jid, got.History[0]["jid"])
	require.Equal(t, []string{"gojob-made", "minutely"}, got.Names)

	// The gem deletes a gojob job and gojob no longer lists it.
	rubytest.Run(t, rs.URL(), cronPrelude+`Sidekiq::Cron::Job.destroy("gojob-made")`)
	_, err = st.Find(ctx, "gojob-made")
	require.ErrorIs(t, err, cron.ErrNotFound)
}

// The natural-language lines gojob reads give fugit's ticks (fugit 1.5.2,
// Debian's, which sidekiq-cron 1.8.0 uses), tick for tick over a month.
func TestNaturalLanguageCronMatchesFugit(t *testing.T) {
	t.Parallel()
	rubytest.Require(t)
	phrases := []string{"every 5 minutes", "every minute", "every hour", "every 3 hours", "every day",
		"every day at noon", "every day at midnight", "every day at 5pm", "every day at 17:30", "every day at 5",
		"every monday at 8am", "every weekday at 7:30", "every 10 seconds", "every 2 days", "every sunday",
		"every tuesday and thursday at 4pm", "every 30 minutes", "every 1 hour"}
	list, err := json.Marshal(phrases)
	require.NoError(t, err)
	out := rubytest.Run(t, "redis://127.0.0.1:1/0", fmt.Sprintf(`
require "fugit"
JSON.parse(%q).each do |s|
  c = Fugit.parse_nat(s)
  c = c.first if c.is_a?(Array)
  puts c.to_cron_s
end
`, list))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, len(phrases))
	base := time.Date(2024, 2, 27, 13, 7, 11, 0, time.UTC)
	for i, p := range phrases {
		ours, err := cronschedule.Parse(p)
		require.NoError(t, err, p)
		theirs, err := cronschedule.Parse(lines[i])
		require.NoError(t, err, lines[i])
		a, b := base, base
		for n := 0; n < 200 && a.Before(base.AddDate(0, 1, 0)); n++ {
			a, b = ours.Next(a, time.UTC), theirs.Next(b, time.UTC)
			require.Equal(t, b, a, "%q (fugit: %s), tick %d", p, lines[i], n)
		}
	}
	for _, refused := range []string{"every day at 12am", "every day at 11:45pm", "every day at five", "every weekend at 9am", "at noon"} {
		_, err := cronschedule.Parse(refused)
		require.Error(t, err, refused)
	}
}

// The sidekiq-cron tab of the Ruby Web UI (gem 1.8.0 on Sidekiq 6.4.1)
// lists a job gojob saved, and its Disable, Enable and Enqueue Now buttons
// act on it as gojob reads it.
func TestSidekiqCronWebTabControlsGojobJobs(t *testing.T) {
	t.Parallel()
	rubytest.Require(t)
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := rs.Pool(t)
	conn := pool.Get()
	defer conn.Close()
	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool, Version: wire.Version6})
	require.NoError(t, err)
	st := &cron.Store{Client: client, Layout: cron.Layout{V1: true}, Location: time.UTC}
	ctx := context.Background()
	j, err := cron.NewJob("nightly-report", "every day at 3am", "ReportJob", "reports", "daily")
	require.NoError(t, err)
	j.Description = "made by gojob"
	require.NoError(t, st.Save(ctx, j))

	ui := rubytest.StartWebUI(t, rs.URL(), "sidekiq/cron/web")
	page := ui.Get(t, "/cron")
	require.Contains(t, page, `<b style="">nightly-report</b>`)
	require.Contains(t, page, `{"retry":true,"queue":"reports","class":"ReportJob","args":["daily"]}`)
	require.Contains(t, page, "every&nbsp;day&nbsp;at&nbsp;3am")

	ui.Post(t, page, "/cron/nightly-report/disable", nil)
	got, err := st.Find(ctx, "nightly-report")
	require.NoError(t, err)
	require.False(t, got.Enabled, "disabled from the Ruby tab")
	ui.Post(t, ui.Get(t, "/cron"), "/cron/nightly-report/enable", nil)
	got, err = st.Find(ctx, "nightly-report")
	require.NoError(t, err)
	require.True(t, got.Enabled)

	ui.Post(t, ui.Get(t, "/cron"), "/cron/nightly-report/enque", nil)
	raws, err := redis.ByteSlices(conn.Do("LRANGE", "queue:reports", 0, -1))
	require.NoError(t, err)
	require.Len(t, raws, 1, "Enqueue Now pushed it")
	pushed, err := wire.ParseJob(raws[0])
	require.NoError(t, err)
	require.Equal(t, "ReportJob", pushed.Class())
	got, err = st.Find(ctx, "nightly-report")
	require.NoError(t, err)
	require.False(t, got.LastEnqueue.IsZero(), "gojob reads the last enqueue Ruby wrote")
}
