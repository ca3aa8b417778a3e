package bench

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gomodule/redigo/redis"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/sidekiq/wire"
)

// benchShape is the shape of a bench's queues: how many, in which order,
// and how large a job is.
type benchShape struct {
	queues int
	// weights is "strict" (no weights: the first non-empty queue in
	// order), "equal" (every queue weight 1: a fresh random order per
	// fetch) or "ramp" (queue i has weight i, 1..N).
	weights      string
	payloadBytes int
}

// parseBenchShape reads --queues, --weights and --payload-bytes.
func parseBenchShape(queues int, weights string, payloadBytes int) (benchShape, error) {
	if queues < 1 {
		return benchShape{}, fmt.Errorf("--queues must be at least 1")
	}
	if payloadBytes < 0 {
		return benchShape{}, fmt.Errorf("--payload-bytes must not be negative")
	}
	switch weights {
	case "strict", "equal":
	case "1..N", "1..n", "ramp":
		weights = "ramp"
	default:
		if weights != "1.."+strconv.Itoa(queues) {
			return benchShape{}, fmt.Errorf("--weights: %q is not strict, equal or 1..%d", weights, queues)
		}
		weights = "ramp"
	}
	return benchShape{queues: queues, weights: weights, payloadBytes: payloadBytes}, nil
}

// queueWeights names the queues prefix-1 … prefix-N (just prefix for one
// queue) with the shape's weights.
func (s benchShape) queueWeights(prefix string) []wire.QueueWeight {
	n := max(s.queues, 1)
	if n == 1 {
		return []wire.QueueWeight{{Name: prefix}}
	}
	out := make([]wire.QueueWeight, n)
	for i := range out {
		out[i].Name = prefix + "-" + strconv.Itoa(i+1)
		switch s.weights {
		case "equal":
			out[i].Weight = 1
		case "ramp":
			out[i].Weight = i + 1
		}
	}
	return out
}

// weightsName is how a result names the order ("" for one queue).
func (s benchShape) weightsName() string {
	switch {
	case s.queues <= 1:
		return ""
	case s.weights == "ramp":
		return "1.." + strconv.Itoa(s.queues)
	case s.weights == "":
		return "strict"
	}
	return s.weights
}

func (s benchShape) String() string {
	var parts []string
	if s.queues > 1 {
		parts = append(parts, fmt.Sprintf("%d queues %s", s.queues, s.weightsName()))
	} else {
		parts = append(parts, "1 queue")
	}
	if s.payloadBytes > 0 {
		parts = append(parts, fmt.Sprintf("%d-byte jobs", s.payloadBytes))
	}
	return strings.Join(parts, ", ")
}

// median returns the median of xs (the upper one of an even count) and the
// lowest.
func median(xs []float64) (med, low float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2], s[0]
}

// Comparison is what `gojob bench --fetch A,B,… --json` prints: every
// run, by round, and each mode's medians.
type Comparison struct {
	Shape   string     `json:"shape"`
	Rounds  [][]Result `json:"rounds"`
	Summary []Summary  `json:"summary"`
}

// Summary is one mode's medians over the rounds; the ratios are to
// the last mode given, per round.
type Summary struct {
	Fetch            string  `json:"fetch"`
	Process          string  `json:"process"`
	Label            string  `json:"label"`
	JobsPerSec       float64 `json:"median_jobs_per_sec"`
	LowestJobsPerSec float64 `json:"lowest_jobs_per_sec"`
	Ratio            float64 `json:"median_ratio"`
	LowestRatio      float64 `json:"lowest_ratio"`
	RedisCalls       float64 `json:"median_redis_commands_per_job"`
	CPUPerJobUS      float64 `json:"median_cpu_us_per_job"`
	RedisCPUPerJobUS float64 `json:"median_redis_cpu_us_per_job"`
	// CPURatio is gojob's CPU per job over Redis's, taken round by round
	// (both move with the machine's pace): the median and the highest.
	CPURatio        float64 `json:"median_cpu_ratio"`
	HighestCPURatio float64 `json:"highest_cpu_ratio"`
	LatencyP99ms    float64 `json:"median_pickup_latency_p99_ms"`
	PeakRSSMB       float64 `json:"median_peak_rss_mb"`
}

// variant is one column of a comparison: a fetch mode in a process mode.
type variant struct {
	mode    string
	process string
	// labelProcess names the process in the label (when several are
	// compared).
	labelProcess bool
}

func (v variant) String() string {
	if v.labelProcess {
		return v.process + " " + v.mode
	}
	return v.mode
}

// runBenchComparison runs each variant once per round, the order turned
// round by round so that none always runs first, and summarises.
func runBenchComparison(c *ucli.Context, pool *redis.Pool, spec benchSpec, modes []variant) error {
	out := &Comparison{Shape: spec.shape.String()}
	w := c.App.Writer
	asJSON := c.Bool("json")
	if !asJSON {
		fmt.Fprintf(w, "%d jobs at concurrency %d, %s; %d rounds\n", spec.jobs, spec.conc, spec.shape, c.Int("rounds"))
	}
	for r := range c.Int("rounds") {
		round := make([]Result, len(modes))
		for k := range modes {
			i := (k + r) % len(modes)
			s := spec
			s.mode, s.process = modes[i].mode, modes[i].process
			if r != c.Int("rounds")-1 || i != 0 {
				s.profile = nil // the profile is of the first mode's last run
				s.cpuProfilePath = ""
			}
			res, err := runOneBench(c.Context, pool, s)
			if err != nil {
				return err
			}
			round[i] = *res
			if !asJSON {
				fmt.Fprintf(w, "round %d %-25s %7.0f jobs/s  %.2f cmds/job  cpu gojob %.1f µs, redis %.1f µs  syscalls %.2f, %.2f  pickup p99 %.2f ms\n",
					r+1, modes[i], res.JobsPerSec, res.RedisCalls, res.CPUPerJobUS, res.RedisCPUPerJobUS,
					res.SyscallsPerJob, res.RedisSyscallsPerJob, res.LatencyP99ms)
			}
		}
		out.Rounds = append(out.Rounds, round)
	}
	base := len(modes) - 1
	for i, m := range modes {
		var jps, ratio, calls, cpu, rcpu, cpuRatio, p99, rss []float64
		for _, round := range out.Rounds {
			jps = append(jps, round[i].JobsPerSec)
			ratio = append(ratio, round[i].JobsPerSec/round[base].JobsPerSec)
			calls = append(calls, round[i].RedisCalls)
			cpu = append(cpu, round[i].CPUPerJobUS)
			rcpu = append(rcpu, round[i].RedisCPUPerJobUS)
			if round[i].RedisCPUPerJobUS > 0 {
				cpuRatio = append(cpuRatio, round[i].CPUPerJobUS/round[i].RedisCPUPerJobUS)
			}
			p99 = append(p99, round[i].LatencyP99ms)
			rss = append(rss, float64(round[i].PeakRSSKB)/1024)
		}
		s := Summary{Fetch: m.mode, Process: m.process, Label: m.String()}
		s.JobsPerSec, s.LowestJobsPerSec = median(jps)
		s.Ratio, s.LowestRatio = median(ratio)
		s.RedisCalls, _ = median(calls)
		s.CPUPerJobUS, _ = median(cpu)
		s.RedisCPUPerJobUS, _ = median(rcpu)
		s.CPURatio, _ = median(cpuRatio)
		if len(cpuRatio) > 0 {
			s.HighestCPURatio = slices.Max(cpuRatio)
		}
		s.LatencyP99ms, _ = median(p99)
		s.PeakRSSMB, _ = median(rss)
		out.Summary = append(out.Summary, s)
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	fmt.Fprintf(w, "\n| run | jobs/s (median, lowest) | vs %s (median, lowest) | cmds/job | cpu µs/job gojob, redis | cpu gojob/redis (median, highest) | pickup p99 ms | peak RSS MB |\n|---|---|---|---|---|---|---|---|\n", modes[base])
	for _, s := range out.Summary {
		fmt.Fprintf(w, "| %s | %.0f, %.0f | %.2fx, %.2fx | %.2f | %.1f, %.1f | %.2fx, %.2fx | %.2f | %.1f |\n", s.Label, s.JobsPerSec, s.LowestJobsPerSec,
			s.Ratio, s.LowestRatio, s.RedisCalls, s.CPUPerJobUS, s.RedisCPUPerJobUS, s.CPURatio, s.HighestCPURatio, s.LatencyP99ms, s.PeakRSSMB)
	}
	return nil
}
