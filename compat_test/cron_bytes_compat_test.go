package compat_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/cron"
	"github.com/gojob/gojob/internal/clocktest"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/rubytest"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// cronHash reads a cron_job hash, its push time blanked.
func cronHash(t *testing.T, conn redis.Conn, key string) map[string]string {
	t.Helper()
	h, err := redis.StringMap(conn.Do("HGETALL", key))
	require.NoError(t, err)
	require.NotEmpty(t, h["last_enqueue_time"])
	h["last_enqueue_time"] = "T"
	return h
}

// savedFields returns the fields of the first HSET/HMSET of
// cron_job:nightly in MONITOR lines, in the order written.
func savedFields(t *testing.T, lines []string) []string {
	t.Helper()
	arg := regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)
	for _, l := range lines {
		args := arg.FindAllStringSubmatch(l, -1)
		if len(args) < 3 || args[1][1] != "cron_job:nightly" {
			continue
		}
		if cmd := strings.ToLower(args[0][1]); cmd != "hmset" && cmd != "hset" {
			continue
		}
		var fields []string
		for i := 2; i+1 < len(args); i += 2 {
			fields = append(fields, args[i][1])
		}
		return fields
	}
	t.Fatalf("no HSET of cron_job:nightly in %q", lines)
	return nil
}

// payloadKeys returns a payload's keys in order, and the payload with the
// values of each push (jid, created_at, enqueued_at) blanked.
func payloadKeys(t *testing.T, raw []byte) ([]string, string) {
	t.Helper()
	m, err := rubyjson.ParseObject(raw)
	require.NoError(t, err)
	var keys []string
	for i := range m.Len() {
		k, _ := m.At(i)
		keys = append(keys, k)
		if k == "jid" || k == "created_at" || k == "enqueued_at" {
			m.Set(k, rubyjson.StringValue("X"))
		}
	}
	return keys, string(m.Encode())
}

// The same job made by the sidekiq-cron gem 1.8.0 (Debian's, beside
// Sidekiq 6.4.1) and by gojob in the 1.x layout gives the same cron_job
// hash, field for field, and the same push: the gem
// pushes a class it can load with perform_async (args before class).
func TestCronHashAndPushAsTheGemWrites(t *testing.T) {
	t.Parallel()
	rubytest.Require(t)
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	conn := pool.Get()
	defer conn.Close()
	mon := rs.StartMonitor(t)
	rubytest.Run(t, rs.URL(), cronPrelude+`
class ReportJob
  include Sidekiq::Worker
end
Sidekiq::Cron::Job.create(name: "nightly", cron: "0 3 * * *", class: "ReportJob", queue: "reports",
  args: ["daily", 2], description: "made in Ruby")
Sidekiq::Cron::Job.find("nightly").enque!
`)
	rubyFields := savedFields(t, mon.Lines(t))
	rubyHash := cronHash(t, conn, "cron_job:nightly")
	rubyPush, err := redis.Bytes(conn.Do("LPOP", "queue:reports"))
	require.NoError(t, err)
	_, err = conn.Do("DEL", "cron_job:nightly", "cron_job:nightly:enqueued", "cron_job:nightly:jid_history", "cron_jobs")
	require.NoError(t, err)

	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool, Version: wire.Version6,
		Clock: clocktest.NewFake(time.Now())})
	require.NoError(t, err)
	st := &cron.Store{Client: client, Layout: cron.Layout{V1: true}, Location: time.UTC}
	j, err := cron.NewJob("nightly", "0 3 * * *", "ReportJob", "reports", "daily", 2)
	require.NoError(t, err)
	j.Description = "made in Ruby"
	ctx := context.Background()
	require.NoError(t, st.Save(ctx, j))
	require.Equal(t, rubyFields, savedFields(t, mon.Lines(t)), "the fields in the gem's to_hash order")
	_, err = st.RunNow(ctx, "nightly")
	require.NoError(t, err)
	require.Equal(t, rubyHash, cronHash(t, conn, "cron_job:nightly"))
	goPush, err := redis.Bytes(conn.Do("LPOP", "queue:reports"))
	require.NoError(t, err)
	rk, rp := payloadKeys(t, rubyPush)
	gk, gp := payloadKeys(t, goPush)
	require.Equal(t, rk, gk)
	require.Equal(t, rp, gp)

	// And the gem reads gojob's job as its own.
	out := rubytest.Run(t, rs.URL(), cronPrelude+`
j = Sidekiq::Cron::Job.find("nightly")
puts JSON.generate({"valid" => j.valid?, "message" => j.message})
`)
	var got struct {
		Valid   bool   `json:"valid"`
		Message string `json:"message"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &got), out)
	require.True(t, got.Valid)
}
