package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
)

// gojob batch status lists the batch's dead and pending jobs with where
// they are and their errors, in text and JSON.
func TestBatchStatusListsPendingAndDeadJobs(t *testing.T) {
	// Not parallel: see the note on runCLI.
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	url := srv.URL()
	conn := srv.Pool(t).Get()
	defer conn.Close()
	out, errOut, code := runCLI(t, "batch", "create", "-r", url, "--on-complete", "Finished")
	require.Equal(t, exitOK, code, errOut)
	bid := strings.TrimSpace(out)
	jids := map[string]string{}
	for _, class := range []string{"Queued", "Failing", "Died"} {
		out, errOut, code := runCLI(t, "push", "-r", url, "--batch", bid, "--json", class, "1")
		require.Equal(t, exitOK, code, errOut)
		var p struct {
			JID string `json:"jid"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &p), out)
		jids[class] = p.JID
	}
	_, errOut, code = runCLI(t, "batch", "seal", "-r", url, bid)
	require.Equal(t, exitOK, code, errOut)

	// Failing waits for a retry, Died is in the dead set (the batch learns
	// it from there), Queued stays in its queue.
	payloads, err := redis.Strings(conn.Do("LRANGE", "queue:default", 0, -1))
	require.NoError(t, err)
	now := time.Now().Unix()
	for _, p := range payloads {
		failed := strings.TrimSuffix(p, "}") + `,"error_class":"Net::ReadTimeout","error_message":"upstream timed out","failed_at":1795000000.5,"retry_count":2}`
		switch {
		case strings.Contains(p, jids["Failing"]):
			_, err = conn.Do("ZADD", "retry", now+600, failed)
		case strings.Contains(p, jids["Died"]):
			_, err = conn.Do("ZADD", "dead", now-60, strings.Replace(failed, "upstream timed out", "card declined", 1))
		default:
			continue
		}
		require.NoError(t, err)
		_, err = conn.Do("LREM", "queue:default", 1, p)
		require.NoError(t, err)
	}

	out, errOut, code = runCLI(t, "batch", "status", "-r", url, bid)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "3 total, 2 pending, 0 succeeded, 1 dead")
	require.Regexp(t, `dead jobs \(1\):\nJID +CLASS +QUEUE +WHERE +ERROR\n`+jids["Died"]+` +Died +default +dead set, died \S+ \S+ UTC +Net::ReadTimeout: card declined\n`, out)
	require.Regexp(t, `pending jobs \(2\):\nJID +CLASS +QUEUE +WHERE +ERROR\n`+jids["Failing"]+` +Failing +default +retry set \(retried 2\), next .*Net::ReadTimeout: upstream timed out\n`+jids["Queued"]+` +queued or running`, out)

	out, errOut, code = runCLI(t, "batch", "status", "-r", url, "--json", "--limit", "1", bid)
	require.Equal(t, exitOK, code, errOut)
	var st struct {
		Pending     int `json:"pending"`
		PendingJobs []struct {
			JID          string `json:"jid"`
			Set          string `json:"set"`
			ErrorMessage string `json:"error_message"`
		} `json:"pending_jobs"`
		DeadJobs []struct {
			JID          string `json:"jid"`
			ErrorClass   string `json:"error_class"`
			ErrorMessage string `json:"error_message"`
			At           string `json:"at"`
		} `json:"dead_jobs"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.Equal(t, 2, st.Pending)
	require.Len(t, st.PendingJobs, 1, "--limit 1")
	require.Equal(t, jids["Failing"], st.PendingJobs[0].JID)
	require.Equal(t, "retry", st.PendingJobs[0].Set)
	require.Len(t, st.DeadJobs, 1)
	require.Equal(t, "Net::ReadTimeout", st.DeadJobs[0].ErrorClass)
	require.Equal(t, "card declined", st.DeadJobs[0].ErrorMessage)
	require.NotEmpty(t, st.DeadJobs[0].At)
}
