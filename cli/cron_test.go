package cli

import (
	"encoding/json"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
)

// gojob cron add/list/disable/run-now/delete manage sidekiq-cron's keys;
// an unknown job exits 4 and a bad schedule exits 2.
func TestCronCommandsManageTheSchedule(t *testing.T) {
	rs := redistest.Start(t)
	url := rs.URL()
	_, errOut, rc := runCLI(t, "cron", "add", "-r", url, "--cron", "0 3 * * *", "--class", "ReportJob", "-q", "reports", "--args", `["daily",1]`, "report")
	require.Equal(t, 0, rc, errOut)
	_, errOut, rc = runCLI(t, "cron", "disable", "-r", url, "report")
	require.Equal(t, 0, rc, errOut)
	out, errOut, rc := runCLI(t, "cron", "list", "-r", url, "--json")
	require.Equal(t, 0, rc, errOut)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &list), out)
	require.Len(t, list, 1)
	require.Equal(t, "report", list[0]["name"])
	require.Equal(t, "reports", list[0]["queue"])
	require.Equal(t, "disabled", list[0]["status"])
	require.Equal(t, `["daily",1]`, list[0]["args"])

	conn, err := rs.Dial()
	require.NoError(t, err)
	defer conn.Close()
	members, err := redis.Strings(conn.Do("SMEMBERS", "cron_jobs:default"))
	require.NoError(t, err)
	require.Equal(t, []string{"cron_job:default:report"}, members)

	out, errOut, rc = runCLI(t, "cron", "run-now", "-r", url, "report")
	require.Equal(t, 0, rc, errOut)
	require.Len(t, out, 25, "a jid and a newline")
	n, err := redis.Int(conn.Do("LLEN", "queue:reports"))
	require.NoError(t, err)
	require.Equal(t, 1, n)

	_, errOut, rc = runCLI(t, "cron", "delete", "-r", url, "report")
	require.Equal(t, 0, rc, errOut)
	_, errOut, rc = runCLI(t, "cron", "enable", "-r", url, "report")
	require.Equal(t, 4, rc, errOut)
	require.Contains(t, errOut, "no such job")
	_, errOut, rc = runCLI(t, "cron", "add", "-r", url, "--cron", "every day at five", "--class", "X", "bad")
	require.Equal(t, 2, rc)
	require.Contains(t, errOut, "natural language")
}
