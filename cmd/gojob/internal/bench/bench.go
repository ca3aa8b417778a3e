// Package bench is `gojob bench`: it pushes no-op jobs to a private queue
// of a Redis, drains them with an in-process server and reports
// throughput, pickup latency, memory, CPU and Redis commands per job, alone
// or against Ruby Sidekiq, redis-benchmark, durable rows or an ordered
// queue.
//
// It is a measuring tool, not part of the runtime: it lives under
// cmd/gojob/internal, so only cmd/gojob can import it
// (cli.WithCommand(bench.Command())), and the cli package and every
// package a Go program embeds stay free of it.
package bench

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/fetchmode"
	"github.com/gojob/gojob/internal/procstat"
	"github.com/gojob/gojob/internal/redisflag"
	"github.com/gojob/gojob/internal/tuning"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

//go:embed bench_worker.rb
var benchWorkerRuby string

// Result is what `gojob bench --json` prints.
type Result struct {
	Jobs        int    `json:"jobs"`
	Concurrency int    `json:"concurrency"`
	Fetch       string `json:"fetch"`
	// Process is "work" (gojob work as a separate process, timed from
	// outside) or "in-process" (a sidekiq.Server in the bench's process).
	Process string `json:"process"`
	// StartupMS is how long gojob work took from exec to its first
	// heartbeat in Redis ("work" only).
	StartupMS     float64 `json:"startup_ms,omitempty"`
	Queues        int     `json:"queues"`
	Weights       string  `json:"weights,omitempty"`
	PayloadBytes  int     `json:"payload_bytes,omitempty"`
	FetchPipeline int     `json:"fetch_pipeline,omitempty"`
	PushPerSec    float64 `json:"push_jobs_per_sec"`
	Seconds       float64 `json:"seconds"`
	JobsPerSec    float64 `json:"jobs_per_sec"`
	LatencySample int     `json:"latency_sample"`
	LatencyP50ms  float64 `json:"pickup_latency_p50_ms"`
	LatencyP99ms  float64 `json:"pickup_latency_p99_ms"`
	PeakRSSKB     int64   `json:"peak_rss_kb"`
	RedisCalls    float64 `json:"redis_commands_per_job"`
	// CPU time per job while draining: this process's (user+system) and
	// the Redis server's (INFO cpu; it includes other clients' load).
	CPUPerJobUS      float64 `json:"cpu_us_per_job"`
	RedisCPUPerJobUS float64 `json:"redis_cpu_us_per_job,omitempty"`
	// Read and write system calls per job while draining: this process's
	// and, when Redis runs on this machine, the Redis server's.
	SyscallsPerJob      float64 `json:"syscalls_per_job,omitempty"`
	RedisSyscallsPerJob float64 `json:"redis_syscalls_per_job,omitempty"`

	RubySeconds    float64 `json:"ruby_seconds,omitempty"`
	RubyJobsPerSec float64 `json:"ruby_jobs_per_sec,omitempty"`
	RubyRatio      float64 `json:"ratio_vs_ruby,omitempty"`

	RedisBenchmarkRPOP  float64 `json:"redis_benchmark_rpop_per_sec,omitempty"`
	RedisBenchmarkRatio float64 `json:"ratio_vs_redis_benchmark,omitempty"`
}

// Command is `gojob bench`. It builds fresh flags on every call: urfave/cli
// writes into a flag when it parses, so two Apps must not share one.
func Command() *ucli.Command {
	return &ucli.Command{
		Name:  "bench",
		Usage: "measure throughput: push N no-op jobs, drain them with gojob work",
		Description: `Pushes N no-op jobs to a fresh queue and drains them at concurrency C with
gojob work, started as a separate process with the defaults a user gets and
two no-op Go handlers (--process work), or with a server inside the bench's
own process (--process in-process). The jobs are pushed to staging lists and
renamed into their queues once the worker is ready, so the drain is timed from
outside, from that instant to the last job done. It reports jobs/s, pickup
latency (push to start, on a trickle of single pushes afterwards), the
worker's peak RSS and CPU per job (/proc), Redis's CPU per job (INFO cpu), and
Redis commands per job (INFO commandstats).
--ruby runs Debian's Ruby Sidekiq 6.4.1 on the same number of jobs (timed from
its first fetch until its queue is empty, as bin/sidekiqload does) and prints
the ratio; --redis-benchmark runs redis-benchmark -t rpop at the same -c.
It only writes its own keys, never flushes, and removes them when done; the
gojob work it starts does what any gojob work does besides (a heartbeat in
processes, polls of the retry and schedule sets).`,
		Flags: append([]ucli.Flag{
			redisflag.Flag(),
			&ucli.IntFlag{Name: "jobs", Aliases: []string{"n"}, Value: 100000, Usage: "jobs to process"},
			&ucli.IntFlag{Name: "concurrency", Aliases: []string{"c"}, Value: 25, Usage: "server concurrency"},
			&ucli.IntFlag{Name: "latency-jobs", Value: 500, Usage: "single pushes for the pickup latency"},
			&ucli.StringFlag{Name: "process", Value: processWork, Usage: "work (start gojob work as a separate process, as users run it, and time it from outside) or in-process (a server inside the bench's own process); both, comma-separated, are run alternately --rounds times and compared"},
			&ucli.StringFlag{Name: "gojob", Usage: "with --process work: the gojob binary to start (default: this one)", TakesFile: true},
			&ucli.StringFlag{Name: "fetch", Value: "reliable", Usage: "fetch mode: reliable (in-progress lists, loses no job), basic (Sidekiq's BasicFetch, BRPOP) or batch (BLMPOP for idle slots, Redis 7+); several, comma-separated, are run alternately --rounds times and compared with the last"},
			&ucli.IntFlag{Name: "queues", Value: 1, Usage: "spread the jobs evenly over this many queues"},
			&ucli.StringFlag{Name: "weights", Value: "strict", Usage: "with --queues: strict (no weights), equal (weight 1 each) or 1..N (queue i weighs i)"},
			&ucli.IntFlag{Name: "payload-bytes", Usage: "make each job about this many bytes long (a string argument; 0: about 100)"},
			&ucli.IntFlag{Name: "fetch-pipeline", Value: tuning.FetchPipeline, Usage: "basic fetch: idle slots' BRPOPs pipelined per connection (1 = a connection per slot, as Ruby)"},
			&ucli.BoolFlag{Name: "ruby", Usage: "also run Ruby Sidekiq 6.4.1 (Debian ruby-sidekiq) and print the ratio"},
			&ucli.BoolFlag{Name: "redis-benchmark", Usage: "also run redis-benchmark -t rpop -c C and print the ratio"},
			newJSONFlag(),
			&ucli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile to `FILE` (go tool pprof): gojob work's whole run with --process work, the drain in-process"},
			&ucli.StringFlag{Name: "memprofile", Usage: "write an allocation profile of the drain to `FILE` (go tool pprof -sample_index=alloc_objects)"},
		}, append(orderedBenchFlags(), benchDurableFlags()...)...),
		Action: func(c *ucli.Context) error {
			n, conc := c.Int("jobs"), c.Int("concurrency")
			var processes []string
			for _, p := range strings.Split(c.String("process"), ",") {
				switch p = strings.TrimSpace(p); p {
				case processWork, processInProcess:
					processes = append(processes, p)
				default:
					return ucli.Exit(fmt.Sprintf("--process %q: want work or in-process", p), exitUsage)
				}
			}
			var profile io.Writer
			if f := c.String("cpuprofile"); f != "" && processes[0] == processInProcess {
				out, err := os.Create(f)
				if err != nil {
					return err
				}
				defer out.Close()
				profile = out
			}
			if n <= 0 || conc <= 0 {
				return ucli.Exit("--jobs and --concurrency must be positive", exitUsage)
			}
			if c.Int("fetch-pipeline") <= 0 {
				return ucli.Exit("--fetch-pipeline must be at least 1", exitUsage)
			}
			shape, err := parseBenchShape(c.Int("queues"), c.String("weights"), c.Int("payload-bytes"))
			if err != nil {
				return ucli.Exit(err.Error(), exitUsage)
			}
			var modes []string
			for _, name := range strings.Split(c.String("fetch"), ",") {
				mode, err := fetchmode.Parse(strings.TrimSpace(name))
				if err != nil {
					return ucli.Exit(err.Error(), exitUsage)
				}
				modes = append(modes, mode)
			}
			if c.Int("rounds") <= 0 {
				return ucli.Exit("--rounds must be positive", exitUsage)
			}
			pool, err := openPool(c.Context, c.String("redis"), 0)
			if err != nil {
				return err
			}
			defer pool.Close()
			mode := modes[0]
			if c.Bool("ordered") {
				return runOrderedBenchCommand(c, pool, mode)
			}
			if c.String("durable") != "" {
				return runDurableBenchCmd(c, pool, mode)
			}
			spec := benchSpec{jobs: n, conc: conc, latencyJobs: c.Int("latency-jobs"), mode: mode,
				pipeline: c.Int("fetch-pipeline"), shape: shape, profile: profile, memProfile: c.String("memprofile"),
				process: processes[0], gojob: c.String("gojob"), redisURL: c.String("redis")}
			if processes[0] == processWork {
				spec.cpuProfilePath = c.String("cpuprofile")
			}
			if len(modes) > 1 || len(processes) > 1 {
				var variants []variant
				for _, p := range processes {
					for _, m := range modes {
						variants = append(variants, variant{mode: m, process: p, labelProcess: len(processes) > 1})
					}
				}
				return runBenchComparison(c, pool, spec, variants)
			}
			res, err := runOneBench(c.Context, pool, spec)
			if err != nil {
				return err
			}
			if c.Bool("ruby") {
				rs, err := runRubyBench(c.Context, pool, c.String("redis"), n, conc, c.App.ErrWriter)
				if err != nil {
					return err
				}
				res.RubySeconds = rs
				res.RubyJobsPerSec = float64(n) / rs
				res.RubyRatio = res.JobsPerSec / res.RubyJobsPerSec
			}
			if c.Bool("redis-benchmark") {
				rps, err := runRedisBenchmark(c.Context, c.String("redis"), n, conc)
				if err != nil {
					return err
				}
				res.RedisBenchmarkRPOP = rps
				res.RedisBenchmarkRatio = res.JobsPerSec / rps
			}
			return printBench(c.App.Writer, res, c.Bool("json"))
		},
	}
}

// benchSpec is one bench run: the jobs, the server and the shape of the
// queues.
type benchSpec struct {
	jobs, conc, latencyJobs int
	mode                    string
	pipeline                int
	shape                   benchShape
	profile                 io.Writer
	// memProfile is where an allocation profile of the drain goes ("":
	// none).
	memProfile string
	// process is processWork or processInProcess; gojob the binary run
	// as the worker ("": this one), redisURL the Redis it is given and
	// cpuProfilePath where it writes a CPU profile ("": none).
	process, gojob, redisURL, cpuProfilePath string
}

// runOneBench runs spec in its process mode.
func runOneBench(ctx context.Context, pool *redis.Pool, spec benchSpec) (*Result, error) {
	if spec.process == processWork {
		return runExternalBench(ctx, pool, spec)
	}
	return runBench(ctx, pool, spec)
}

// runBench drains with a sidekiq.Server inside this process.
func runBench(ctx context.Context, pool *redis.Pool, spec benchSpec) (*Result, error) {
	n, conc, latencyJobs, mode := spec.jobs, spec.conc, spec.latencyJobs, spec.mode
	queues := spec.shape.queueWeights("gojob-bench-" + contract.NewJID()[:8])
	defer cleanupBench(pool, queues)
	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool, Version: wire.Version6})
	if err != nil {
		return nil, err
	}
	res := &Result{Jobs: n, Concurrency: conc, LatencySample: latencyJobs, Fetch: mode, Process: processInProcess,
		Queues: len(queues), Weights: spec.shape.weightsName(), PayloadBytes: spec.shape.payloadBytes}
	hooks := benchHooksFrom(ctx)
	hooks.client(client)

	pushStart := time.Now()
	if err := pushBenchJobs(ctx, client, queues, n, spec.shape.payloadBytes); err != nil {
		return nil, err
	}
	res.PushPerSec = float64(n) / time.Since(pushStart).Seconds()

	var done atomic.Int64
	finished := make(chan struct{})
	var latMu sync.Mutex
	var latencies []time.Duration
	measuring := atomic.Bool{}
	srv, err := sidekiq.NewServer(&sidekiq.ServerConfig{
		Pool: pool, Queues: queues, Concurrency: conc,
		Version: wire.Version6, DisablePoller: true, Logger: zerolog.Nop(), Client: client,
		ShutdownTimeout: 5 * time.Second, Fetch: mode, FetchPipeline: spec.pipeline,
	})
	if err != nil {
		return nil, err
	}
	hooks.server(srv)
	srv.Handle("BenchJob", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		if measuring.Load() {
			if t, ok := job.Time("enqueued_at"); ok {
				d := time.Since(t)
				latMu.Lock()
				latencies = append(latencies, d)
				latMu.Unlock()
			}
			return nil
		}
		if done.Add(1) == int64(n) {
			close(finished)
		}
		return nil
	}), nil)
	cmdsBefore, _ := commandCount(pool)
	redisCPUBefore, _ := redisCPU(pool)
	cpuBefore := processCPU()
	redisPID := redisProcessID(pool)
	sysBefore, sysOK := procstat.Syscalls(0)
	redisSysBefore, redisSysOK := procstat.Syscalls(redisPID)
	if spec.memProfile != "" {
		runtime.MemProfileRate = 512
	}
	if spec.profile != nil {
		if err := pprof.StartCPUProfile(spec.profile); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	if err := srv.Start(ctx); err != nil {
		return nil, err
	}
	select {
	case <-finished:
	case <-ctx.Done():
		srv.Stop(context.Background())
		return nil, ctx.Err()
	}
	elapsed := time.Since(start)
	hooks.drained()
	res.FetchPipeline = srv.Status().FetchPipeline
	if spec.memProfile != "" {
		if err := writeHeapProfile(spec.memProfile); err != nil {
			return nil, err
		}
	}
	if spec.profile != nil {
		pprof.StopCPUProfile()
	}
	res.CPUPerJobUS = float64((processCPU() - cpuBefore).Microseconds()) / float64(n)
	if after, ok := procstat.Syscalls(0); ok && sysOK {
		res.SyscallsPerJob = float64(after-sysBefore) / float64(n)
	}
	if after, ok := procstat.Syscalls(redisPID); ok && redisSysOK && redisPID > 0 {
		res.RedisSyscallsPerJob = float64(after-redisSysBefore) / float64(n)
	}
	if after, err := redisCPU(pool); err == nil && redisCPUBefore > 0 {
		res.RedisCPUPerJobUS = (after - redisCPUBefore) * 1e6 / float64(n)
	}
	cmdsAfter, _ := commandCount(pool)
	res.Seconds = elapsed.Seconds()
	res.JobsPerSec = float64(n) / res.Seconds
	if cmdsBefore > 0 && cmdsAfter > cmdsBefore {
		res.RedisCalls = float64(cmdsAfter-cmdsBefore) / float64(n)
	}

	// Pickup latency: single pushes with a short gap, measured push → start,
	// to the last queue (the one a fetch tries last in strict order).
	measuring.Store(true)
	for i := 0; i < latencyJobs; i++ {
		j, _ := wire.NewJob("BenchJob", i)
		j.SetQueue(queues[len(queues)-1].Name)
		if _, err := client.Push(ctx, j, nil); err != nil {
			return nil, err
		}
		time.Sleep(time.Millisecond)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		latMu.Lock()
		got := len(latencies)
		latMu.Unlock()
		if got >= latencyJobs {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv.Stop(stopCtx)
	latMu.Lock()
	slices.Sort(latencies)
	if len(latencies) > 0 {
		res.LatencyP50ms = float64(latencies[len(latencies)/2].Microseconds()) / 1000
		res.LatencyP99ms = float64(latencies[len(latencies)*99/100].Microseconds()) / 1000
	}
	latMu.Unlock()
	res.PeakRSSKB = procstat.KB("VmHWM")
	return res, nil
}

// pushBenchJobs pushes n jobs, spread evenly over the queues (queue i gets
// jobs i, i+len(queues), …), each about payloadBytes long when that is set
// (a string argument fills it).
func pushBenchJobs(ctx context.Context, client *sidekiq.Client, queues []wire.QueueWeight, n, payloadBytes int) error {
	const batch = 1000
	filler := ""
	if payloadBytes > 0 {
		j, err := wire.NewJob("BenchJob", 0, "")
		if err != nil {
			return err
		}
		j.SetQueue(queues[0].Name)
		filler = strings.Repeat("x", max(payloadBytes-len(j.Bytes()), 0))
	}
	for q, qw := range queues {
		for i := q; i < n; i += batch * len(queues) {
			jobs := make([]*wire.Job, 0, batch)
			for k := i; k < n && len(jobs) < batch; k += len(queues) {
				args := []any{k}
				if payloadBytes > 0 {
					args = append(args, filler)
				}
				j, err := wire.NewJob("BenchJob", args...)
				if err != nil {
					return err
				}
				j.SetQueue(qw.Name)
				jobs = append(jobs, j)
			}
			if _, err := client.PushBulk(ctx, jobs, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

func cleanupBench(pool *redis.Pool, queues []wire.QueueWeight) {
	conn := pool.Get()
	defer conn.Close()
	for _, q := range queues {
		conn.Do("DEL", contract.QueueKey(q.Name))
		conn.Do("SREM", contract.KeyQueues, q.Name)
	}
}

// infoLines returns the lines of one INFO section.
func infoLines(pool *redis.Pool, section string) ([]string, error) {
	conn := pool.Get()
	defer conn.Close()
	info, err := redis.String(conn.Do("INFO", section))
	if err != nil {
		return nil, err
	}
	return strings.Split(info, "\n"), nil
}

// commandCount sums INFO commandstats calls (0 when unavailable).
func commandCount(pool *redis.Pool) (int64, error) {
	lines, err := infoLines(pool, "commandstats")
	var total int64
	for _, line := range lines {
		if i := strings.Index(line, "calls="); i >= 0 {
			rest := line[i+6:]
			if j := strings.IndexByte(rest, ','); j >= 0 {
				rest = rest[:j]
			}
			v, _ := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			total += v
		}
	}
	return total, err
}

// writeHeapProfile writes the allocations made so far to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("allocs").WriteTo(f, 0)
}

// redisProcessID returns the Redis server's process id (INFO server), 0
// when unknown. Its /proc entry is only this machine's Redis when Redis
// runs here, which the bench cannot tell for sure: a Redis elsewhere
// whose pid happens to exist here would show another process's figures.
func redisProcessID(pool *redis.Pool) int {
	lines, _ := infoLines(pool, "server")
	for _, line := range lines {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, _ := strconv.Atoi(v)
			if exe, err := os.Readlink("/proc/" + v + "/exe"); err == nil && strings.Contains(exe, "redis") {
				return pid
			}
		}
	}
	return 0
}

// processCPU returns the user+system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU returns the Redis server's used_cpu_sys + used_cpu_user in
// seconds.
func redisCPU(pool *redis.Pool) (float64, error) {
	lines, err := infoLines(pool, "cpu")
	var total float64
	for _, line := range lines {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return total, err
}

// runRubyBench runs Debian's Ruby Sidekiq on n no-op jobs and returns the
// seconds from its first fetch until its queue is empty.
func runRubyBench(ctx context.Context, pool *redis.Pool, redisURL string, n, conc int, stderr io.Writer) (float64, error) {
	bin, err := exec.LookPath("sidekiq")
	if err != nil {
		return 0, ucli.Exit("--ruby needs Debian's ruby-sidekiq (apt-get install ruby-sidekiq)", exitFailed)
	}
	queue := "gojob-bench-ruby-" + contract.NewJID()[:8]
	qs := []wire.QueueWeight{{Name: queue}}
	defer cleanupBench(pool, qs)
	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool, Version: wire.Version6})
	if err != nil {
		return 0, err
	}
	if err := pushBenchJobs(ctx, client, qs, n, 0); err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "gojob-bench-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	worker := filepath.Join(dir, "bench_worker.rb")
	if err := os.WriteFile(worker, []byte(benchWorkerRuby), 0o644); err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, bin, "-r", worker, "-q", queue, "-c", strconv.Itoa(conc), "-t", "5")
	cmd.Env = append(os.Environ(), "REDIS_URL="+redisURL)
	cmd.Dir = dir
	cmd.Stdout = io.Discard
	var errBuf strings.Builder
	cmd.Stderr = &errBuf
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}()
	conn := pool.Get()
	defer conn.Close()
	var start time.Time
	deadline := time.Now().Add(30 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			exited <- err
			return 0, fmt.Errorf("ruby sidekiq exited early: %v\n%s", err, errBuf.String())
		default:
		}
		l, err := redis.Int(conn.Do("LLEN", contract.QueueKey(queue)))
		if err != nil {
			return 0, err
		}
		now := time.Now()
		if start.IsZero() && l < n {
			start = now
		}
		if l == 0 {
			return now.Sub(start).Seconds(), nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, fmt.Errorf("ruby sidekiq did not drain the queue in 30 minutes")
}

var rpopRE = regexp.MustCompile(`RPOP: ([0-9.]+) requests per second`)

// runRedisBenchmark runs redis-benchmark -t rpop at the same concurrency.
func runRedisBenchmark(ctx context.Context, redisURL string, n, conc int) (float64, error) {
	u, err := url.Parse(redisURL)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "unix") {
		return 0, ucli.Exit("--redis-benchmark needs a redis:// or unix:// URL", exitUsage)
	}
	args := []string{"-t", "rpop", "-c", strconv.Itoa(conc), "-n", strconv.Itoa(max(n, 100000)), "-q"}
	if u.Scheme == "unix" {
		args = append(args, "-s", u.Path)
	} else {
		args = append(args, "-h", u.Hostname())
		if p := u.Port(); p != "" {
			args = append(args, "-p", p)
		}
	}
	out, err := exec.CommandContext(ctx, "redis-benchmark", args...).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark: %v: %s", err, out)
	}
	m := rpopRE.FindAllSubmatch(out, -1)
	if len(m) == 0 {
		return 0, fmt.Errorf("redis-benchmark: unexpected output: %s", out)
	}
	return strconv.ParseFloat(string(m[len(m)-1][1]), 64)
}

func printBench(w io.Writer, r *Result, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fetch := r.Fetch
	switch {
	case r.FetchPipeline == 1:
		fetch += " (a connection per slot, as Ruby)"
	case r.FetchPipeline > 1:
		fetch += fmt.Sprintf(" (up to %d fetches pipelined per connection)", r.FetchPipeline)
	}
	fmt.Fprintf(w, "jobs:            %d at concurrency %d, fetch %s\n", r.Jobs, r.Concurrency, fetch)
	switch r.Process {
	case processWork:
		fmt.Fprintf(w, "process:         gojob work, a separate process (heartbeat %.0f ms after exec), timed from outside\n", r.StartupMS)
	case processInProcess:
		fmt.Fprintln(w, "process:         a server inside the bench's own process")
	}
	fmt.Fprintf(w, "push:            %.0f jobs/s (bulk, 1000 per round trip)\n", r.PushPerSec)
	fmt.Fprintf(w, "gojob:           %.0f jobs/s (%.2f s)\n", r.JobsPerSec, r.Seconds)
	fmt.Fprintf(w, "pickup latency:  p50 %.2f ms, p99 %.2f ms (%d single pushes)\n", r.LatencyP50ms, r.LatencyP99ms, r.LatencySample)
	fmt.Fprintf(w, "peak RSS:        %.1f MB\n", float64(r.PeakRSSKB)/1024)
	if r.RedisCalls > 0 {
		fmt.Fprintf(w, "redis commands:  %.3f per job while draining (all clients)\n", r.RedisCalls)
	}
	if r.CPUPerJobUS > 0 {
		fmt.Fprintf(w, "cpu per job:     gojob %.2f µs", r.CPUPerJobUS)
		if r.RedisCPUPerJobUS > 0 {
			fmt.Fprintf(w, ", redis-server %.2f µs", r.RedisCPUPerJobUS)
		}
		fmt.Fprintln(w, " while draining")
	}
	if r.SyscallsPerJob > 0 {
		fmt.Fprintf(w, "syscalls per job: gojob %.2f", r.SyscallsPerJob)
		if r.RedisSyscallsPerJob > 0 {
			fmt.Fprintf(w, ", redis-server %.2f", r.RedisSyscallsPerJob)
		}
		fmt.Fprintln(w, " (reads and writes)")
	}
	if r.RubyJobsPerSec > 0 {
		fmt.Fprintf(w, "ruby sidekiq:    %.0f jobs/s (%.2f s) → gojob is %.1fx\n", r.RubyJobsPerSec, r.RubySeconds, r.RubyRatio)
	}
	if r.RedisBenchmarkRPOP > 0 {
		fmt.Fprintf(w, "redis-benchmark: RPOP %.0f/s → gojob reaches %.0f%% of it\n", r.RedisBenchmarkRPOP, r.RedisBenchmarkRatio*100)
	}
	return nil
}
