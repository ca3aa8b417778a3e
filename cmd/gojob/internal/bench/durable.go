package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/durable"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq"
)

// `gojob bench --durable URL` runs the plain bench and the same bench with
// durable rows (every BenchJob durable, in a table of its own in URL),
// alternating them --rounds times in the same run, and reports the
// durable throughput, its SQL statements per job and its ratio to plain.

// benchHooks let a bench variant install things on runBench's client and
// server (carried in the context, so runBench keeps its signature).
type benchHooks struct {
	// client runs after the client is made, before the push.
	client func(*sidekiq.Client)
	// server runs after the server is made, before it starts (the push is
	// done).
	server func(*sidekiq.Server)
	// drained runs when the last pushed job is done.
	drained func()
}

type benchHooksKey struct{}

func withBenchHooks(ctx context.Context, h *benchHooks) context.Context {
	return context.WithValue(ctx, benchHooksKey{}, h)
}

func benchHooksFrom(ctx context.Context) *benchHooks {
	h, _ := ctx.Value(benchHooksKey{}).(*benchHooks)
	if h == nil {
		return &benchHooks{client: func(*sidekiq.Client) {}, server: func(*sidekiq.Server) {}, drained: func() {}}
	}
	return h
}

func benchDurableFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "durable", Usage: "also run the bench with durable rows in `URL` (postgres://… or sqlite:PATH; a table of its own, dropped after) and print the ratio to plain"},
		&ucli.IntFlag{Name: "rounds", Value: 3, Usage: "with --durable or several --fetch modes: the runs alternated this many times"},
		&ucli.DurationFlag{Name: "durable-batch-window", Usage: "with --durable: durable.Config.BatchWindow"},
	}
}

// DurableRound is one plain run and one durable run.
type DurableRound struct {
	PlainJobsPerSec   float64 `json:"plain_jobs_per_sec"`
	DurableJobsPerSec float64 `json:"durable_jobs_per_sec"`
	Ratio             float64 `json:"ratio"`
	// Statements per job: the push (bulk inserts), the drain (locks and
	// deletes) and both.
	PushStatementsPerJob  float64 `json:"push_sql_statements_per_job"`
	DrainStatementsPerJob float64 `json:"drain_sql_statements_per_job"`
	StatementsPerJob      float64 `json:"sql_statements_per_job"`
	CommitsPerJob         float64 `json:"sql_commits_per_job"`
	DurableCPUPerJobUS    float64 `json:"durable_cpu_us_per_job"`
	// RedisCPUPerJobUS and DatabaseCPUPerJobUS are redis-server's and the
	// local PostgreSQL server's CPU per job while draining (0 when the
	// database is not a PostgreSQL server on this machine).
	RedisCPUPerJobUS    float64 `json:"durable_redis_cpu_us_per_job,omitempty"`
	DatabaseCPUPerJobUS float64 `json:"durable_database_cpu_us_per_job,omitempty"`
	// PlainCPUPerJobUS and PlainRedisCPUPerJobUS are the plain run's CPU
	// per job, gojob's and redis-server's: what a durable job costs them
	// at the least.
	PlainCPUPerJobUS      float64 `json:"plain_cpu_us_per_job"`
	PlainRedisCPUPerJobUS float64 `json:"plain_redis_cpu_us_per_job,omitempty"`
	DurableLatencyP50ms   float64 `json:"durable_pickup_latency_p50_ms"`
	RowsLeft              int64   `json:"rows_left"`
}

// DurableResult is what `gojob bench --durable … --json` prints.
type DurableResult struct {
	Jobs        int            `json:"jobs"`
	Concurrency int            `json:"concurrency"`
	Fetch       string         `json:"fetch"`
	Database    string         `json:"database"`
	Rounds      []DurableRound `json:"rounds"`
	MedianRatio float64        `json:"median_ratio"`
}

func runDurableBenchCmd(c *ucli.Context, pool *redis.Pool, mode string) error {
	n, conc := c.Int("jobs"), c.Int("concurrency")
	rounds := c.Int("rounds")
	if rounds <= 0 {
		return ucli.Exit("--rounds must be positive", exitUsage)
	}
	res := &DurableResult{Jobs: n, Concurrency: conc, Fetch: mode}
	var profile io.Writer // the last durable run's drain
	if f := c.String("cpuprofile"); f != "" {
		out, err := os.Create(f)
		if err != nil {
			return err
		}
		defer out.Close()
		profile = out
	}
	for i := range rounds {
		var prof io.Writer
		if i == rounds-1 {
			prof = profile
		}
		plain, err := runBench(c.Context, pool, benchSpec{jobs: n, conc: conc, latencyJobs: c.Int("latency-jobs"), mode: mode, pipeline: c.Int("fetch-pipeline")})
		if err != nil {
			return err
		}
		round, db, err := runDurableBench(c.Context, pool, c.String("durable"), c.Duration("durable-batch-window"), n, conc,
			c.Int("latency-jobs"), mode, c.Int("fetch-pipeline"), prof)
		if err != nil {
			return err
		}
		res.Database = db
		round.PlainJobsPerSec = plain.JobsPerSec
		round.PlainCPUPerJobUS, round.PlainRedisCPUPerJobUS = plain.CPUPerJobUS, plain.RedisCPUPerJobUS
		round.Ratio = round.DurableJobsPerSec / plain.JobsPerSec
		res.Rounds = append(res.Rounds, *round)
		if !c.Bool("json") {
			printDurableRound(c.App.Writer, len(res.Rounds), round)
		}
	}
	ratios := make([]float64, len(res.Rounds))
	for i, r := range res.Rounds {
		ratios[i] = r.Ratio
	}
	slices.Sort(ratios)
	res.MedianRatio = ratios[len(ratios)/2]
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintf(c.App.Writer, "%d jobs at concurrency %d, fetch %s, durable rows in %s\n", n, conc, res.Fetch, res.Database)
	fmt.Fprintf(c.App.Writer, "median ratio durable/plain: %.3fx over %d rounds\n", res.MedianRatio, len(res.Rounds))
	return nil
}

func printDurableRound(w io.Writer, i int, r *DurableRound) {
	db := ""
	if r.DatabaseCPUPerJobUS > 0 {
		db = fmt.Sprintf(", postgres %.1f", r.DatabaseCPUPerJobUS)
	}
	fmt.Fprintf(w, "round %d: plain %.0f jobs/s, durable %.0f jobs/s (%.3fx); SQL statements per job %.3f (push %.4f, drain %.3f), commits per job %.3f; cpu µs/job plain gojob %.1f, redis %.1f; durable gojob %.1f, redis %.1f%s; pickup p50 %.2f ms; rows left %d\n",
		i, r.PlainJobsPerSec, r.DurableJobsPerSec, r.Ratio, r.StatementsPerJob, r.PushStatementsPerJob, r.DrainStatementsPerJob,
		r.CommitsPerJob, r.PlainCPUPerJobUS, r.PlainRedisCPUPerJobUS, r.DurableCPUPerJobUS, r.RedisCPUPerJobUS, db, r.DurableLatencyP50ms, r.RowsLeft)
}

// runDurableBench runs the bench with every BenchJob durable, in a table
// of its own, dropped afterwards.
func runDurableBench(ctx context.Context, pool *redis.Pool, url string, window time.Duration, n, conc, latencyJobs int,
	mode string, pipeline int, profile io.Writer) (*DurableRound, string, error) {
	d, err := durable.New(&durable.Config{
		URLs:        []string{url},
		Table:       "gojob_bench_" + contract.NewJID()[:8],
		Classes:     map[string]time.Duration{"BenchJob": 0},
		MaxConns:    conc,
		BatchWindow: window,
		Logger:      zerolog.Nop(),
	})
	if err != nil {
		return nil, "", ucli.Exit(err.Error(), exitUsage)
	}
	defer d.Close()
	if _, err := d.Migrate(ctx); err != nil {
		return nil, "", err
	}
	defer d.DropTable(context.WithoutCancel(ctx))
	var atDrain, drained durable.Stats
	var pgAtDrain, pgDrained time.Duration
	hooks := &benchHooks{
		client: func(c *sidekiq.Client) { c.Extend(d) },
		server: func(s *sidekiq.Server) {
			s.Extend(d)
			atDrain = d.Stats()
			pgAtDrain = postgresCPU()
		},
		drained: func() {
			drained = d.Stats()
			pgDrained = postgresCPU()
		},
	}
	before := d.Stats()
	br, err := runBench(withBenchHooks(ctx, hooks), pool, benchSpec{jobs: n, conc: conc, latencyJobs: latencyJobs, mode: mode, pipeline: pipeline, profile: profile})
	if err != nil {
		return nil, "", err
	}
	// The push and the drain of the n jobs; the single pushes of the
	// pickup latency come after and are not counted.
	jobs := float64(n)
	round := &DurableRound{
		DurableJobsPerSec:     br.JobsPerSec,
		PushStatementsPerJob:  float64(atDrain.Statements-before.Statements) / jobs,
		DrainStatementsPerJob: float64(drained.Statements-atDrain.Statements) / jobs,
		StatementsPerJob:      float64(drained.Statements-before.Statements) / jobs,
		CommitsPerJob:         float64(drained.Commits-before.Commits) / jobs,
		DurableCPUPerJobUS:    br.CPUPerJobUS,
		RedisCPUPerJobUS:      br.RedisCPUPerJobUS,
		DurableLatencyP50ms:   br.LatencyP50ms,
	}
	if strings.HasPrefix(url, "postgres") && pgAtDrain > 0 {
		round.DatabaseCPUPerJobUS = float64((pgDrained - pgAtDrain).Microseconds()) / jobs
	}
	if st, err := d.Status(ctx); err == nil {
		for _, db := range st.Databases {
			round.RowsLeft += db.Total
		}
	}
	return round, d.Databases()[0], nil
}

// postgresCPU is the CPU time of this machine's PostgreSQL server so far:
// its processes' own and that of the backends they reaped (utime, stime,
// cutime and cstime of every process named postgres), or 0 when none runs
// here. Other databases' work on the same server counts too.
func postgresCPU() time.Duration {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var ticks int64
	for _, e := range dirs {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open || s[open+1:end] != "postgres" {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 15 {
			continue
		}
		for _, k := range f[11:15] { // fields 14-17: utime stime cutime cstime
			n, _ := strconv.ParseInt(k, 10, 64)
			ticks += n
		}
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100
