package cli

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
)

// An ActiveJob mailer reads as its mailer in gojob retries, queue jobs and
// job, as in Sidekiq's Web UI, and the class filter takes either name.
func TestActiveJobShowsItsWrappedClass(t *testing.T) {
	// Not parallel: see the note on runCLI.
	raw, err := os.ReadFile("../testdata/activejob/mailer-retry.json")
	require.NoError(t, err)
	displayMailer := strings.TrimSpace(string(raw))
	rs := redistest.Start(t)
	conn := rs.Pool(t).Get()
	defer conn.Close()
	_, err = conn.Do("ZADD", contract.KeyRetry, 1795296600, displayMailer)
	require.NoError(t, err)
	queued := strings.Replace(displayMailer, "aa11bb22cc33dd44ee55ff66", "bb11bb22cc33dd44ee55ff66", 1)
	_, err = conn.Do("LPUSH", "queue:mailers", queued)
	require.NoError(t, err)
	_, err = conn.Do("SADD", "queues", "mailers")
	require.NoError(t, err)

	out, errOut, code := runCLI(t, "retries", "-r", rs.URL())
	require.Zero(t, code, errOut)
	require.Contains(t, out, "UserMailer#welcome")
	require.NotContains(t, out, "JobWrapper")
	for _, class := range []string{"UserMailer", "UserMailer#welcome", "ActionMailer::MailDeliveryJob", "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper"} {
		out, errOut, code = runCLI(t, "retries", "-r", rs.URL(), "--class", class)
		require.Zero(t, code, errOut)
		require.Contains(t, out, "1 of 1 match", class)
	}
	out, _, code = runCLI(t, "retries", "-r", rs.URL(), "--class", "OtherMailer")
	require.Zero(t, code)
	require.Contains(t, out, "0 of 1 match")

	out, errOut, code = runCLI(t, "retries", "-r", rs.URL(), "--json")
	require.Zero(t, code, errOut)
	var list struct {
		Entries []entryJSON `json:"entries"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list.Entries, 1)
	e := list.Entries[0]
	require.Equal(t, "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper", e.Class)
	require.Equal(t, "UserMailer#welcome", e.DisplayClass)
	require.JSONEq(t, `[{"user":"gid://app/User/7"},["gid://app/User/7"]]`, string(e.DisplayArgs))
	require.Equal(t, "1b6f3c9e-4d0a-4c8e-9d5e-2f1a7b3c4d5e", e.ActiveJobID)

	out, errOut, code = runCLI(t, "queue", "jobs", "-r", rs.URL(), "mailers")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "UserMailer#welcome")
	require.Contains(t, out, "gid://app/User/7")

	out, errOut, code = runCLI(t, "job", "-r", rs.URL(), "aa11bb22cc33dd44ee55ff66")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "where:    retry\n")
	require.Contains(t, out, "class:    UserMailer#welcome (ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper)\n")
	require.Contains(t, out, "job_id:   1b6f3c9e-4d0a-4c8e-9d5e-2f1a7b3c4d5e\n")
	require.Contains(t, out, `args:     [{"user":"gid://app/User/7"},["gid://app/User/7"]]`)
	out, errOut, code = runCLI(t, "job", "-r", rs.URL(), "bb11bb22cc33dd44ee55ff66")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "where:    queue mailers\n")
}
