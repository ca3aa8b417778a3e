package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/jobctl"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// An --http handler's answer decides the outcome: 503 with Retry-After
// snoozes, 410 discards, X-Gojob-Outcome: retry_in retries at
// Retry-After, and a 2xx JSON body's result goes to the status hash.
func TestHTTPHandlerOutcomes(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	conn := pool.Get()
	defer conn.Close()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-Gojob-Class") {
		case "Busy":
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusServiceUnavailable)
		case "Gone":
			w.WriteHeader(http.StatusGone)
		case "Later":
			w.Header().Set("X-Gojob-Outcome", "retry_in")
			w.Header().Set("Retry-After", "600")
			w.WriteHeader(http.StatusInternalServerError)
		case "Report":
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"result":{"rows":7},"progress":1}`))
		}
	}))
	t.Cleanup(web.Close)
	srv, err := sidekiq.NewServer(&sidekiq.ServerConfig{Pool: pool, Concurrency: 2, Logger: zerolog.Nop(), DisablePoller: true})
	require.NoError(t, err)
	done := &doneCounter{}
	srv.Extend(done)
	for _, class := range []string{"Busy", "Gone", "Later", "Report"} {
		srv.Handle(class, &httpHandler{URL: web.URL, Pool: pool}, nil)
	}
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Stop(ctx)
	})
	jids := map[string]string{}
	for _, class := range []string{"Busy", "Gone", "Later", "Report"} {
		res, err := srv.Client().Enqueue(context.Background(), "default", class)
		require.NoError(t, err)
		jids[class] = res.JID
	}
	scoreIn := func(set, jid string) (time.Duration, *wire.Job) {
		vals, err := redis.ByteSlices(conn.Do("ZRANGE", set, 0, -1, "WITHSCORES"))
		require.NoError(t, err)
		for i := 0; i+1 < len(vals); i += 2 {
			job, err := wire.ParseJob(vals[i])
			require.NoError(t, err)
			if job.JID() == jid {
				f, err := strconv.ParseFloat(string(vals[i+1]), 64)
				require.NoError(t, err)
				return time.Until(contract.FromEpochSeconds(f)), job
			}
		}
		return 0, nil
	}
	wait.For(t, "the snooze and the retry", func() bool {
		_, s := scoreIn(contract.KeySchedule, jids["Busy"])
		_, r := scoreIn(contract.KeyRetry, jids["Later"])
		return s != nil && r != nil
	})
	in, job := scoreIn(contract.KeySchedule, jids["Busy"])
	require.InDelta(t, 120, in.Seconds(), 10)
	require.False(t, job.Has("error_message"), "a snooze is no failure")
	in, _ = scoreIn(contract.KeyRetry, jids["Later"])
	require.InDelta(t, 600, in.Seconds(), 120) // Sidekiq's jitter is added
	wait.For(t, "the result", func() bool {
		st, err := jobctl.ReadStatus(context.Background(), pool, jids["Report"])
		require.NoError(t, err)
		return st != nil && st.Outcome == "success"
	})
	st, err := jobctl.ReadStatus(context.Background(), pool, jids["Report"])
	require.NoError(t, err)
	require.JSONEq(t, `{"rows":7}`, string(st.Result))
	// Gone: discarded, neither retried nor dead.
	wait.For(t, "every job to run", func() bool {
		return done.n.Load() == 4
	})
	for _, set := range []string{contract.KeyRetry, contract.KeyDead} {
		_, j := scoreIn(set, jids["Gone"])
		require.Nil(t, j, set)
	}
}

// doneCounter counts finished jobs.
type doneCounter struct{ n atomic.Int64 }

func (d *doneCounter) JobDone(string, string, time.Duration, error) { d.n.Add(1) }
