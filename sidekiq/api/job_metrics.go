package api

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/wire"
)

// JobMetrics is what processes recorded per job class in the window (the
// Sidekiq 7+ Metrics tab; Ruby's lib/sidekiq/metrics/query.rb).
type JobMetrics struct {
	// Since and Until bound the window (whole minutes, UTC).
	Since, Until time.Time
	// Classes are sorted by total execution time, then executions, then
	// name.
	Classes []ClassMetrics
	// Histogram is the class's count per bucket of HistogramLimits (the
	// last bucket takes the rest); nil unless a class was given.
	Histogram []int64
}

// ClassMetrics are one class's totals.
type ClassMetrics struct {
	Class string
	// Processed counts executions ("|p"), Failed failures ("|f").
	Processed, Failed int64
	// Milliseconds is the time of the successful runs ("|ms").
	Milliseconds int64
}

// JobMetrics reads the metrics of the last minutes minutes, the current
// one included: 1 to 480 (the keys' 8-hour TTL), 0 means 60 (the Web UI's
// default). It sums the `j|<minute>` hashes of every minute of the window,
// read in both the 7.x (`j|%Y%m%d|%-H:%-M`) and 8.x (`j|%y%m%d|%-H:%M`)
// layouts, and when class is not "" that class's per-minute execution-time
// histograms (BITFIELD GET u16 #0..#25 of both key layouts), all in one
// pipeline. Within a minute, a field found in both layouts counts once, at
// the larger of its two values: gojob's format for all readers
// (docs/version-follow.md) writes each run in both, and a cluster runs one
// Ruby major version at a time but during an upgrade (whose minutes then
// show the larger of the two versions' figures). Processes writing the 6.x
// format record no metrics.
func (a *API) JobMetrics(ctx context.Context, minutes int, class string) (*JobMetrics, error) {
	if minutes == 0 {
		minutes = 60
	}
	until := a.clock.Now()
	if minutes < 1 || minutes > 480 {
		return nil, fmt.Errorf("sidekiq: job metrics: minutes must be between 1 and 480, got %d", minutes)
	}
	until = until.UTC().Truncate(time.Minute)
	out := &JobMetrics{Since: until.Add(-time.Duration(minutes-1) * time.Minute), Until: until}
	v7, v8 := wire.Version{Major: 7}, wire.Version{Major: 8}
	conn, err := a.conn(ctx, "job metrics")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	gets := make([]any, 0, 4*contract.HistogramBuckets)
	for i := range contract.HistogramBuckets {
		gets = append(gets, "GET", "u16", fmt.Sprintf("#%d", i))
	}
	for i := range minutes {
		t := until.Add(-time.Duration(i) * time.Minute)
		k7, _ := contract.MetricsKeys(v7, t)
		k8, _ := contract.MetricsKeys(v8, t)
		conn.Send("HGETALL", k7[0])
		conn.Send("HGETALL", k8[len(k8)-1])
		if class != "" {
			conn.Send("BITFIELD", append([]any{contract.HistogramKey(v7, class, t)}, gets...)...)
			conn.Send("BITFIELD", append([]any{contract.HistogramKey(v8, class, t)}, gets...)...)
		}
	}
	if err := conn.Flush(); err != nil {
		return nil, fmt.Errorf("sidekiq: job metrics: %w", err)
	}
	byClass := map[string]*ClassMetrics{}
	if class != "" {
		out.Histogram = make([]int64, contract.HistogramBuckets)
	}
	var layouts [2]map[string]int64
	var hists [2][]int64
	for range minutes {
		for l := range layouts {
			fields, err := redis.Int64Map(redis.ReceiveContext(conn, ctx))
			if err != nil {
				return nil, fmt.Errorf("sidekiq: job metrics: %w", err)
			}
			layouts[l] = fields
		}
		// A field in both layouts counts once, at its larger value: gojob's
		// format for all readers writes the same runs in both.
		for f, n := range layouts[0] {
			layouts[1][f] = max(layouts[1][f], n)
		}
		for f, n := range layouts[1] {
			i := strings.LastIndexByte(f, '|')
			if i <= 0 {
				continue
			}
			cm := byClass[f[:i]]
			if cm == nil {
				cm = &ClassMetrics{Class: f[:i]}
				byClass[f[:i]] = cm
			}
			switch f[i+1:] {
			case "p":
				cm.Processed += n
			case "f":
				cm.Failed += n
			case "ms":
				cm.Milliseconds += n
			}
		}
		if class == "" {
			continue
		}
		for l := range hists {
			counts, err := redis.Int64s(redis.ReceiveContext(conn, ctx))
			if err != nil {
				return nil, fmt.Errorf("sidekiq: job metrics histogram of %s: %w", class, err)
			}
			hists[l] = counts
		}
		for i := range out.Histogram {
			var n int64
			for _, h := range hists {
				if i < len(h) {
					n = max(n, h[i])
				}
			}
			out.Histogram[i] += n
		}
	}
	for _, cm := range byClass {
		out.Classes = append(out.Classes, *cm)
	}
	slices.SortFunc(out.Classes, func(x, y ClassMetrics) int {
		return cmp.Or(cmp.Compare(y.Milliseconds, x.Milliseconds), cmp.Compare(y.Processed, x.Processed), cmp.Compare(x.Class, y.Class))
	})
	return out, nil
}
