package bench

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
)

// The bench drains with gojob work as a separate process by default, and
// with a server in its own process on request; both report the same
// figures, read from each process.
func TestBenchSmall(t *testing.T) {
	// Not parallel: see the note on runGojob.
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	for _, c := range []struct {
		process, fetch string
		low, high      float64 // Redis commands per job
		fetchPipeline  int
	}{
		// A take script (and its LMPOP, HSET, HDEL) per batch of up to 4.
		{"work", "reliable", 0.5, 2.2, 0},
		{"in-process", "reliable", 0.5, 2.2, 0},
		// One BRPOP per job, min(default 8, -c 4) per connection.
		{"in-process", "basic", 0.9, 1.1, 4},
	} {
		out, errOut, code := runGojob(t, "bench", "-r", srv.URL(), "-n", "2000", "-c", "4", "--latency-jobs", "20", "--json",
			"--fetch", c.fetch, "--process", c.process)
		require.Equal(t, 0, code, errOut)
		var r Result
		require.NoError(t, json.Unmarshal([]byte(out), &r))
		require.Equal(t, 2000, r.Jobs)
		require.Equal(t, c.process, r.Process)
		require.Equal(t, c.fetch, r.Fetch)
		require.Positive(t, r.PeakRSSKB)
		require.Positive(t, r.LatencyP99ms)
		if c.process == "work" {
			require.Positive(t, r.StartupMS)
		}
		require.Greater(t, r.JobsPerSec, 0.0)
		require.GreaterOrEqual(t, r.RedisCalls, c.low, c.fetch)
		require.LessOrEqual(t, r.RedisCalls, c.high, c.fetch)
		require.Equal(t, 20, r.LatencySample)
		if c.process == "in-process" {
			require.Equal(t, c.fetchPipeline, r.FetchPipeline)
		}
		require.Greater(t, r.CPUPerJobUS, 0.0)
		require.Greater(t, r.RedisCPUPerJobUS, 0.0)
	}
	// It cleaned up after itself.
	conn, err := srv.Dial()
	require.NoError(t, err)
	defer conn.Close()
	for _, pattern := range []string{"queue:*", "working:*", "reliable-fetcher-heartbeat-*", "gojob-bench-*"} {
		keys, err := redis.Strings(conn.Do("KEYS", pattern))
		require.NoError(t, err)
		require.Empty(t, keys, pattern)
	}
}

// A durable bench reports, per round, what the plain run cost gojob and
// Redis per job beside the durable run's figures: the floor a durable job
// cannot go under (docs/benchmarks.md, "Durable jobs").
func TestDurableBenchReportsThePlainRunsCPU(t *testing.T) {
	// Not parallel: see the note on runGojob.
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	db := "sqlite:" + filepath.Join(t.TempDir(), "bench.db")
	out, errOut, code := runGojob(t, "bench", "-r", srv.URL(), "-n", "500", "-c", "4", "--latency-jobs", "5",
		"--rounds", "2", "--durable", db, "--json")
	require.Equal(t, 0, code, errOut)
	var r DurableResult
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Len(t, r.Rounds, 2)
	for _, round := range r.Rounds {
		require.Greater(t, round.PlainJobsPerSec, 0.0)
		require.Greater(t, round.DurableJobsPerSec, 0.0)
		require.Greater(t, round.PlainCPUPerJobUS, 0.0)
		require.Greater(t, round.PlainRedisCPUPerJobUS, 0.0)
		require.Greater(t, round.DurableCPUPerJobUS, 0.0)
		require.Zero(t, round.RowsLeft)
	}
}

// A comparison of fetch modes reports, per mode, the medians over its
// rounds and gojob's CPU per job over Redis's, taken round by round.
func TestBenchComparisonReportsTheCPURatioPerRound(t *testing.T) {
	// Not parallel: see the note on runGojob.
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	out, errOut, code := runGojob(t, "bench", "-r", srv.URL(), "-n", "1000", "-c", "4", "--latency-jobs", "5",
		"--fetch", "reliable,basic", "--rounds", "3", "--json")
	require.Equal(t, 0, code, errOut)
	var cmp Comparison
	require.NoError(t, json.Unmarshal([]byte(out), &cmp))
	require.Len(t, cmp.Rounds, 3)
	require.Len(t, cmp.Summary, 2)
	for i, s := range cmp.Summary {
		var ratios []float64
		for _, round := range cmp.Rounds {
			ratios = append(ratios, round[i].CPUPerJobUS/round[i].RedisCPUPerJobUS)
		}
		slices.Sort(ratios)
		require.InDelta(t, ratios[1], s.CPURatio, 1e-9, s.Fetch)
		require.InDelta(t, ratios[2], s.HighestCPURatio, 1e-9, s.Fetch)
	}
	require.Equal(t, 1.0, cmp.Summary[1].Ratio, "basic is the base")

	out, errOut, code = runGojob(t, "bench", "-r", srv.URL(), "-n", "500", "-c", "4", "--latency-jobs", "5",
		"--fetch", "reliable,basic", "--rounds", "1")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "| cpu gojob/redis (median, highest) |")

	// gojob work beside the in-process server, each labelled.
	out, errOut, code = runGojob(t, "bench", "-r", srv.URL(), "-n", "500", "-c", "4", "--latency-jobs", "5",
		"--process", "work,in-process", "--rounds", "2", "--json")
	require.Equal(t, 0, code, errOut)
	cmp = Comparison{}
	require.NoError(t, json.Unmarshal([]byte(out), &cmp))
	require.Len(t, cmp.Summary, 2)
	require.Equal(t, "work reliable", cmp.Summary[0].Label)
	require.Equal(t, "in-process reliable", cmp.Summary[1].Label)
	for _, round := range cmp.Rounds {
		require.Equal(t, "work", round[0].Process)
		require.Equal(t, "in-process", round[1].Process)
		require.Positive(t, round[0].CPUPerJobUS)
	}
}

// Bad flag values are usage errors (exit 2) before Redis is reached, an
// unreachable Redis is 3, as for gojob's other commands.
func TestBenchUsageErrors(t *testing.T) {
	// Not parallel: see the note on runGojob.
	const nowhere = "redis://127.0.0.1:1/0"
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"--fetch-pipeline", "0"}, "--fetch-pipeline must be at least 1"},
		{[]string{"-n", "0"}, "--jobs and --concurrency must be positive"},
		{[]string{"--fetch", "nosuch"}, "nosuch"},
		{[]string{"--queues", "0"}, "--queues must be at least 1"},
		{[]string{"--rounds", "0"}, "--rounds must be positive"},
		{[]string{"--process", "elsewhere"}, "--process \"elsewhere\""},
		{[]string{"--bogus"}, "flag provided but not defined: -bogus"},
	} {
		out, errOut, code := runGojob(t, append([]string{"bench", "-r", nowhere}, c.args...)...)
		require.Equal(t, exitUsage, code, "%v: %s", c.args, errOut)
		require.Empty(t, out, c.args)
		require.Contains(t, errOut, c.err, c.args)
	}
	_, errOut, code := runGojob(t, "bench", "-r", nowhere)
	require.Equal(t, exitUnreachable, code, errOut)
	require.Contains(t, errOut, "cannot reach Redis")
}

// bench's --redis flag is gojob's: the same names, environment variable,
// default and help; its help never shows a password from REDIS_URL.
func TestBenchRedisFlagIsGojobs(t *testing.T) {
	// Not parallel: see the note on runGojob; it sets REDIS_URL.
	redisLine := func(cmd string) string {
		out, errOut, code := runGojob(t, cmd, "--help")
		require.Equal(t, 0, code, errOut)
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "--redis value") {
				return strings.Join(strings.Fields(l), " ")
			}
		}
		t.Fatalf("gojob %s --help has no --redis:\n%s", cmd, out)
		return ""
	}
	require.Equal(t, redisLine("stats"), redisLine("bench"))

	const secret = "Sup3rSecretPW"
	t.Setenv("REDIS_URL", "redis://:"+secret+"@127.0.0.1:1/0")
	out, errOut, _ := runGojob(t, "bench", "--help")
	require.NotContains(t, out+errOut, secret)
	_, errOut, code := runGojob(t, "bench", "-n", "10")
	require.Equal(t, exitUnreachable, code, errOut)
	require.NotContains(t, errOut, secret)
}

// gojob --help lists bench with gojob's commands, before version.
func TestBenchIsListedInHelp(t *testing.T) {
	// Not parallel: see the note on runGojob.
	out, _, code := runGojob(t, "--help")
	require.Equal(t, 0, code)
	bench := strings.Index(out, "\n   bench ")
	version := strings.Index(out, "\n   version ")
	require.Positive(t, bench, out)
	require.Less(t, bench, version, out)
}
