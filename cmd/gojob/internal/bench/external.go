package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gomodule/redigo/redis"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/cli"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/procstat"
	"github.com/gojob/gojob/internal/redisflag"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// The bench's process modes: "work" starts `gojob work` as a separate
// process, as an operator runs it, and times it from outside; "in-process"
// drains with a sidekiq.Server inside the bench's own process.
const (
	processWork      = "work"
	processInProcess = "in-process"
)

// WorkerCommand is the hidden `gojob bench-worker`: `gojob work` (the
// arguments after --) with two no-op Go handlers, the program a user
// builds with cli.Run and cli.WithHandler. BenchJob counts the jobs it
// runs and, at the last of --jobs, pushes a mark to --done; BenchPickup
// pushes how long after its enqueued_at it started, in microseconds, to
// --pickup. The bench reads both keys; nothing else in the worker knows
// it is measured.
func WorkerCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "bench-worker",
		Hidden:    true,
		Usage:     "gojob work with the bench's no-op handlers (run by gojob bench)",
		ArgsUsage: "-- work [flags]",
		Flags: []ucli.Flag{
			redisflag.Flag(),
			&ucli.IntFlag{Name: "jobs", Usage: "BenchJobs to count before marking --done"},
			&ucli.StringFlag{Name: "done", Usage: "list that gets a mark after the last BenchJob"},
			&ucli.StringFlag{Name: "pickup", Usage: "list that gets each BenchPickup's pickup latency in µs"},
		},
		Action: func(c *ucli.Context) error {
			pool, err := openPool(c.Context, c.String("redis"), 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			n := int64(c.Int("jobs"))
			done, pickup := c.String("done"), c.String("pickup")
			var count atomic.Int64
			benchJob := sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
				if count.Add(1) != n {
					return nil
				}
				conn := pool.Get()
				defer conn.Close()
				_, err := conn.Do("RPUSH", done, "1")
				return err
			})
			benchPickup := sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
				t, ok := job.Time("enqueued_at")
				if !ok {
					return errors.New("BenchPickup without enqueued_at")
				}
				conn := pool.Get()
				defer conn.Close()
				_, err := conn.Do("RPUSH", pickup, time.Since(t).Microseconds())
				return err
			})
			args := append([]string{"gojob"}, c.Args().Slice()...)
			code := cli.Run(c.Context, args, c.App.Writer, c.App.ErrWriter,
				cli.WithHandler("BenchJob", benchJob, nil), cli.WithHandler("BenchPickup", benchPickup, nil))
			if code != 0 {
				return ucli.Exit("", code)
			}
			return nil
		},
	}
}

// workerProcess is a `gojob bench-worker -- work …` the bench started.
type workerProcess struct {
	cmd    *exec.Cmd
	exited chan error
	stderr *tailBuffer
	// started is when the process was started; ready when its heartbeat
	// was first seen in Redis.
	started, ready time.Time
}

// startWorker starts the worker for spec on queues and waits until its
// heartbeat is in Redis, so that the drain is timed without its start-up.
func startWorker(ctx context.Context, pool *redis.Pool, spec benchSpec, queues []wire.QueueWeight, doneKey, pickupKey string) (*workerProcess, error) {
	bin := spec.gojob
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		bin = exe
	}
	args := []string{"bench-worker", "-r", spec.redisURL, "--jobs", strconv.Itoa(spec.jobs),
		"--done", doneKey, "--pickup", pickupKey, "--",
		"work", "-r", spec.redisURL, "-c", strconv.Itoa(spec.conc), "--fetch", spec.mode}
	if spec.mode == "basic" {
		args = append(args, "--fetch-pipeline", strconv.Itoa(spec.pipeline))
	}
	if spec.cpuProfilePath != "" {
		args = append(args, "--cpuprofile", spec.cpuProfilePath)
	}
	for _, q := range queues {
		name := q.Name
		if q.Weight > 0 {
			name += "," + strconv.Itoa(q.Weight)
		}
		args = append(args, "-q", name)
	}
	w := &workerProcess{exited: make(chan error, 1), stderr: &tailBuffer{max: 64 << 10}}
	w.cmd = exec.Command(bin, args...)
	w.cmd.Stdout = w.stderr
	w.cmd.Stderr = w.stderr
	w.started = time.Now()
	if err := w.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { w.exited <- w.cmd.Wait() }()
	marker := ":" + strconv.Itoa(w.cmd.Process.Pid) + ":"
	conn := pool.Get()
	defer conn.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case err := <-w.exited:
			w.exited <- err
			return nil, fmt.Errorf("gojob work exited before it was ready: %v\n%s", err, w.stderr)
		default:
		}
		members, err := redis.Strings(conn.Do("SMEMBERS", contract.KeyProcesses))
		if err != nil {
			w.stop()
			return nil, err
		}
		for _, m := range members {
			if strings.Contains(m, marker) {
				w.ready = time.Now()
				return w, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			w.stop()
			return nil, fmt.Errorf("gojob work did not heartbeat within a minute\n%s", w.stderr)
		}
		time.Sleep(time.Millisecond)
	}
}

// stop stops the worker as an operator does (SIGTERM), killing it if it
// has not exited in 30 s, and returns what it exited with.
func (w *workerProcess) stop() error {
	w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-w.exited:
		return err
	case <-time.After(30 * time.Second):
		w.cmd.Process.Kill()
		<-w.exited
		return fmt.Errorf("gojob work did not stop within 30 s of SIGTERM\n%s", w.stderr)
	}
}

// runExternalBench is runBench with `gojob work` as a separate process:
// the jobs are pushed to staging lists first and renamed into their
// queues at once, so the worker, idle and ready by then, drains a full
// backlog from one instant that the bench knows; the drain ends when the
// last BenchJob's mark arrives. CPU is each process's own, from /proc
// (the worker) and INFO cpu (Redis), over that window.
func runExternalBench(ctx context.Context, pool *redis.Pool, spec benchSpec) (*Result, error) {
	n := spec.jobs
	prefix := "gojob-bench-" + contract.NewJID()[:8]
	queues := spec.shape.queueWeights(prefix)
	doneKey, pickupKey := prefix+":done", prefix+":pickup"
	staging := make([]wire.QueueWeight, len(queues))
	for i, q := range queues {
		staging[i] = wire.QueueWeight{Name: q.Name + "-staging", Weight: q.Weight}
	}
	defer cleanupBench(pool, append(queues, staging...))
	defer func() {
		conn := pool.Get()
		conn.Do("DEL", doneKey, pickupKey)
		conn.Close()
	}()
	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool, Version: wire.Version6})
	if err != nil {
		return nil, err
	}
	res := &Result{Jobs: n, Concurrency: spec.conc, LatencySample: spec.latencyJobs, Fetch: spec.mode,
		Process: processWork, Queues: len(queues), Weights: spec.shape.weightsName(), PayloadBytes: spec.shape.payloadBytes}
	pushStart := time.Now()
	if err := pushBenchJobs(ctx, client, staging, n, spec.shape.payloadBytes); err != nil {
		return nil, err
	}
	res.PushPerSec = float64(n) / time.Since(pushStart).Seconds()
	// The staging queues are not queues anyone serves: out of the set
	// that lists them, as the renamed ones go into it.
	conn := pool.Get()
	defer conn.Close()
	for _, q := range staging {
		if _, err := conn.Do("SREM", contract.KeyQueues, q.Name); err != nil {
			return nil, err
		}
	}

	w, err := startWorker(ctx, pool, spec, queues, doneKey, pickupKey)
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			w.stop()
		}
	}()
	res.StartupMS = float64(w.ready.Sub(w.started).Microseconds()) / 1000
	pid := w.cmd.Process.Pid
	redisPID := redisProcessID(pool)
	cmdsBefore, _ := commandCount(pool)
	redisCPUBefore, _ := redisCPU(pool)
	sysBefore, sysOK := procstat.Syscalls(pid)
	redisSysBefore, redisSysOK := procstat.Syscalls(redisPID)
	cpuBefore, cpuOK := procstat.CPU(pid)

	conn.Send("MULTI")
	for i, q := range staging {
		conn.Send("RENAME", contract.QueueKey(q.Name), contract.QueueKey(queues[i].Name))
		conn.Send("SADD", contract.KeyQueues, queues[i].Name)
	}
	start := time.Now()
	if _, err := conn.Do("EXEC"); err != nil {
		return nil, err
	}
	if err := waitMark(ctx, pool, w, doneKey, 30*time.Minute); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	if after, ok := procstat.CPU(pid); ok && cpuOK {
		res.CPUPerJobUS = float64(after-cpuBefore) / 1e3 / float64(n)
	}
	if after, ok := procstat.Syscalls(pid); ok && sysOK {
		res.SyscallsPerJob = float64(after-sysBefore) / float64(n)
	}
	if after, ok := procstat.Syscalls(redisPID); ok && redisSysOK && redisPID > 0 {
		res.RedisSyscallsPerJob = float64(after-redisSysBefore) / float64(n)
	}
	if after, err := redisCPU(pool); err == nil && redisCPUBefore > 0 {
		res.RedisCPUPerJobUS = (after - redisCPUBefore) * 1e6 / float64(n)
	}
	if cmdsAfter, _ := commandCount(pool); cmdsBefore > 0 && cmdsAfter > cmdsBefore {
		res.RedisCalls = float64(cmdsAfter-cmdsBefore) / float64(n)
	}
	res.Seconds = elapsed.Seconds()
	res.JobsPerSec = float64(n) / res.Seconds

	// Pickup latency: single pushes with a short gap to the last queue (the
	// one a strict fetch tries last), push to start as the worker saw it.
	for i := range spec.latencyJobs {
		j, _ := wire.NewJob("BenchPickup", i)
		j.SetQueue(queues[len(queues)-1].Name)
		if _, err := client.Push(ctx, j, nil); err != nil {
			return nil, err
		}
		time.Sleep(time.Millisecond)
	}
	if err := waitList(ctx, pool, w, pickupKey, spec.latencyJobs, time.Minute); err != nil {
		return nil, err
	}
	lat, err := redis.Int64s(conn.Do("LRANGE", pickupKey, 0, -1))
	if err != nil {
		return nil, err
	}
	res.LatencyP50ms, res.LatencyP99ms = percentilesMS(lat)
	res.PeakRSSKB = procstat.PIDKB(pid, "VmHWM")
	stopped = true
	if err := w.stop(); err != nil {
		return nil, fmt.Errorf("gojob work: %v\n%s", err, w.stderr)
	}
	return res, nil
}

// exitedErr is the error of a worker that has exited (nil while it runs);
// the exit stays in w.exited for the next look.
func (w *workerProcess) exitedErr() error {
	select {
	case err := <-w.exited:
		w.exited <- err
		return fmt.Errorf("gojob work exited while measured: %v\n%s", err, w.stderr)
	default:
		return nil
	}
}

// waitMark waits for the mark pushed to list key (and takes it), or for
// the worker to exit. It blocks in Redis rather than polls: a bench that
// asked Redis every few hundred microseconds during the drain would add
// to the Redis CPU it measures and take a core's share from the worker.
func waitMark(ctx context.Context, pool *redis.Pool, w *workerProcess, key string, limit time.Duration) error {
	conn := pool.Get()
	defer conn.Close()
	deadline := time.Now().Add(limit)
	for {
		if err := w.exitedErr(); err != nil {
			return err
		}
		// A blocking pop of a second at most, so that a worker that died
		// is noticed.
		v, err := redis.Values(redis.DoContext(conn, ctx, "BLPOP", key, 1))
		if err != nil && err != redis.ErrNil {
			return err
		}
		if len(v) > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gojob work did not finish the measured jobs in %s\n%s", limit, w.stderr)
		}
	}
}

// waitList waits until list key holds n entries, or the worker exits.
func waitList(ctx context.Context, pool *redis.Pool, w *workerProcess, key string, n int, limit time.Duration) error {
	conn := pool.Get()
	defer conn.Close()
	deadline := time.Now().Add(limit)
	for {
		if err := w.exitedErr(); err != nil {
			return err
		}
		l, err := redis.Int(conn.Do("LLEN", key))
		if err != nil {
			return err
		}
		if l >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gojob work ran %d of %d measured jobs in %s\n%s", l, n, limit, w.stderr)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// percentilesMS returns the median and 99th percentile of microsecond
// samples, in milliseconds.
func percentilesMS(us []int64) (p50, p99 float64) {
	if len(us) == 0 {
		return 0, 0
	}
	s := slices.Clone(us)
	slices.Sort(s)
	return float64(s[len(s)/2]) / 1000, float64(s[len(s)*99/100]) / 1000
}

// tailBuffer keeps the last max bytes written to it: the worker's log,
// shown when it fails.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-b.max:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
