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
	_, errOut, rc := runCLI(t, "cron", "add", "-r", url, "--cron-layout", "v2", "--cron", "0 3 * * *", "--class", "ReportJob", "-q", "reports", "--args", `["daily",1]`, "report")
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
	_, errOut, rc = runCLI(t, "cron", "add", "-r", url, "--cron-layout", "v2", "--cron", "every day at five", "--class", "X", "bad")
	require.Equal(t, 2, rc)
	require.Contains(t, errOut, "natural language")
}

// On a Redis without a schedule, gojob cron add writes the layout of the
// gem recommended beside the Sidekiq version in use (1.x beside Sidekiq 6,
// 2.x beside 7 and 8), and with no version known the 2.x layout that cron
// list and the dashboard report, with a note naming --cron-layout v1.
func TestCronAddOnAnEmptyRedisPicksTheLayoutOfTheSidekiqInUse(t *testing.T) {
	add := func(url string) (string, int) {
		_, errOut, rc := runCLI(t, "cron", "add", "-r", url, "--cron", "0 3 * * *", "--class", "ReportJob", "report")
		return errOut, rc
	}
	sets := func(t *testing.T, conn redis.Conn) []int {
		t.Helper()
		n1, err := redis.Int(conn.Do("SCARD", "cron_jobs"))
		require.NoError(t, err)
		n2, err := redis.Int(conn.Do("SCARD", "cron_jobs:default"))
		require.NoError(t, err)
		return []int{n1, n2}
	}
	for _, c := range []struct {
		name, info string
		want       []int
	}{
		{"nothing known", "", []int{0, 1}},
		{"Sidekiq 6.4.1", `{"hostname":"r","pid":1,"identity":"r:1:aaaaaaaaaaaa"}`, []int{1, 0}},
		{"Sidekiq 7.3.10", `{"hostname":"r","pid":1,"identity":"r:1:aaaaaaaaaaaa","version":"7.3.10"}`, []int{0, 1}},
		{"Sidekiq 8.1.7", `{"hostname":"r","pid":1,"identity":"r:1:aaaaaaaaaaaa","version":"8.1.7"}`, []int{0, 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs := redistest.Start(t)
			conn, err := rs.Dial()
			require.NoError(t, err)
			defer conn.Close()
			if c.info != "" {
				_, err = conn.Do("SADD", "processes", "r:1:aaaaaaaaaaaa")
				require.NoError(t, err)
				_, err = conn.Do("HSET", "r:1:aaaaaaaaaaaa", "info", c.info)
				require.NoError(t, err)
			}
			errOut, rc := add(rs.URL())
			require.Equal(t, 0, rc, errOut)
			if c.info == "" {
				require.Contains(t, errOut, "wrote the sidekiq-cron 2.x layout")
				require.Contains(t, errOut, "--cron-layout v1")
			} else {
				require.NotContains(t, errOut, "--cron-layout", "a known version needs no note")
			}
			require.Equal(t, c.want, sets(t, conn))
		})
	}
}

// A flag between cron and its subcommand is the subcommand's.
func TestCronFlagsBeforeTheSubcommand(t *testing.T) {
	rs := redistest.Start(t)
	_, errOut, rc := runCLI(t, "cron", "-r", rs.URL(), "add", "--cron", "*/5 * * * *", "--class", "X", "every5")
	require.Equal(t, 0, rc, errOut)
	out, errOut, rc := runCLI(t, "cron", "-r", rs.URL(), "--json", "list")
	require.Equal(t, 0, rc, errOut)
	require.Contains(t, out, `"every5"`)
}
