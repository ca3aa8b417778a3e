package cron

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/clocktest"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// captureDir holds files of the sidekiq-cron 2.3.1 capture (real gem
// beside Ruby Sidekiq 8.1.7, Redis 7.0.15), verbatim; its README.md says
// how they were made.
const captureDir = "../testdata/sidekiq-cron-2.3.1"

// pair is one field of a hash, in Redis's order.
type pair struct{ Field, Value string }

// captureDump reads the keys of a capture dump file: for each
// "# <key> type=… ttl=…" header, the "field<TAB>value" (or
// "member<TAB>score", or element) lines under it. A file may dump a key
// more than once; each dump is kept, in order.
func captureDump(t *testing.T, file string) map[string][][]pair {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(captureDir, file))
	require.NoError(t, err)
	out := map[string][][]pair{}
	key := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "# ") {
			key = ""
			if f := strings.Fields(line); len(f) >= 3 && strings.HasPrefix(f[2], "type=") {
				key = f[1]
				out[key] = append(out[key], []pair{})
			}
			continue
		}
		if key == "" {
			continue
		}
		f, v, _ := strings.Cut(line, "\t")
		dumps := out[key]
		dumps[len(dumps)-1] = append(dumps[len(dumps)-1], pair{f, v})
	}
	return out
}

// hashPairs reads a hash in Redis's order (insertion order for a small
// hash, as the capture's HGETALL shows it).
func hashPairs(t *testing.T, conn redis.Conn, key string) []pair {
	t.Helper()
	vals, err := redis.Strings(conn.Do("HGETALL", key))
	require.NoError(t, err)
	var out []pair
	for i := 0; i+1 < len(vals); i += 2 {
		out = append(out, pair{vals[i], vals[i+1]})
	}
	return out
}

// The jobs that sidekiq-cron 2.3.1 created in the capture
// (Sidekiq::Cron::Job.create of a Sidekiq job class with the default
// options, 2026-11-28 17:29:02 UTC) and that gojob writes (gojob cron add:
// NewJob; a retry option: a schedule file's) give the same cron_job hash,
// field for field, value for value, in the same order; the same enqueued
// set; and, after a push (the gem's enqueue!, gojob cron run-now), the same
// last_enqueue_time, history entry and payload.
func TestCronHashAsSidekiqCron231WritesIt(t *testing.T) {
	t.Parallel()
	created := captureDump(t, "cron-keys-after-create.txt")
	afterEnqueue := captureDump(t, "cron-job-hash.txt")
	pushed := map[string]string{}
	data, err := os.ReadFile(filepath.Join(captureDir, "cron-pushed-payloads.txt"))
	require.NoError(t, err)
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		name, payload, _ := strings.Cut(l, "\t")
		pushed[name] = payload
	}

	createdAt := time.Date(2026, 11, 28, 17, 29, 2, 8320300, time.UTC)
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	conn := pool.Get()
	defer conn.Close()
	clk := clocktest.NewFake(createdAt)
	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool, Version: wire.Version8, Clock: clk})
	require.NoError(t, err)
	st := &Store{Client: client, Location: time.UTC}
	ctx := context.Background()

	every5, err := NewJob("every5", "*/5 * * * *", "X", "default", 1, "a")
	require.NoError(t, err)
	// Job.create(retry: …) sets the option as a schedule file's retry does.
	file, err := parseFile([]byte(`
noretry:
  cron: "*/5 * * * *"
  class: X
  queue: default
  args: [2, "b"]
  retry: false
retry3:
  cron: "*/5 * * * *"
  class: X
  queue: low
  args: []
  retry: 3
  description: three retries
`))
	require.NoError(t, err)
	jobs := []*Job{every5}
	for _, name := range []string{"noretry", "retry3"} {
		for _, j := range file {
			if j.Name == name {
				j.Source = "dynamic" // Job.create, not the schedule loader
				jobs = append(jobs, j)
			}
		}
	}
	require.Len(t, jobs, 3)

	for _, j := range jobs {
		key := "cron_job:default:" + j.Name
		require.NoError(t, st.Save(ctx, j))
		require.Equal(t, created[key][0], hashPairs(t, conn, key), "the hash of %s", j.Name)
		members, err := redis.Strings(conn.Do("ZRANGE", key+":enqueued", 0, -1, "WITHSCORES"))
		require.NoError(t, err)
		want := created[key+":enqueued"][0]
		require.Len(t, want, 1)
		require.Equal(t, []string{want[0].Field, "1795886942.0083203"}, members, "the enqueued set of %s", j.Name)
	}
	isMember, err := redis.Strings(conn.Do("SMEMBERS", "cron_jobs:default"))
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"cron_job:default:every5", "cron_job:default:noretry", "cron_job:default:retry3"}, isMember)

	// The gem's enqueue! of every5 at 17:29:03.4: only last_enqueue_time
	// changes; the history entry and the payload as the gem wrote them.
	clk.Set(time.Date(2026, 11, 28, 17, 29, 3, 400000000, time.UTC))
	for _, j := range jobs {
		jid, err := st.RunNow(ctx, j.Name)
		require.NoError(t, err)
		queue := "default"
		if j.Name == "retry3" {
			queue = "low"
		}
		raw, err := redis.Bytes(conn.Do("LPOP", "queue:"+queue))
		require.NoError(t, err)
		require.Equal(t, blankPush(t, []byte(pushed[j.Name])), blankPush(t, raw), "the push of %s", j.Name)
		if j.Name != "every5" {
			continue
		}
		key := "cron_job:default:every5"
		require.Equal(t, afterEnqueue[key][1], hashPairs(t, conn, key))
		hist, err := redis.Strings(conn.Do("LRANGE", key+":jid_history", 0, -1))
		require.NoError(t, err)
		wantHist := afterEnqueue[key+":jid_history"][0]
		require.Len(t, wantHist, 1)
		require.Equal(t, []string{strings.Replace(wantHist[0].Field, "77f4512fc50991fbcf620b03", jid, 1)}, hist)
	}
}

// blankPush returns a payload with the values of each push (jid,
// created_at, enqueued_at) blanked, its keys in order.
func blankPush(t *testing.T, raw []byte) string {
	t.Helper()
	m, err := rubyjson.ParseObject(raw)
	require.NoError(t, err)
	for _, k := range []string{"jid", "created_at", "enqueued_at"} {
		if _, ok := m.Get(k); ok {
			m.Set(k, rubyjson.StringValue("X"))
		}
	}
	return string(m.Encode())
}

// The retry field is the message's retry option as Ruby's to_s writes it,
// "" without one (a message the gem built for a class it does not load,
// or for ActiveJob).
func TestRetryFieldFollowsTheMessage(t *testing.T) {
	t.Parallel()
	for msg, want := range map[string]string{
		`{"retry":true,"queue":"default","class":"X","args":[]}`: "true",
		`{"retry":false,"class":"X"}`:                            "false",
		`{"retry":3,"class":"X"}`:                                "3",
		`{"retry":2.0,"class":"X"}`:                              "2.0",
		`{"retry":"5","class":"X"}`:                              "5",
		`{"retry":null,"class":"X"}`:                             "",
		`{"queue":"default","class":"NotLoadedHere","args":[4]}`: "",
		`not json`: "",
	} {
		require.Equal(t, want, retryField(msg), msg)
	}
}
