// Package gctune sets the garbage collector of a gojob process: a high
// GOGC, for little GC work per job, bounded by a soft memory limit that
// follows the live heap, so that a worker whose live heap is a few MB does
// not grow to five times it.
//
// A worker's live heap is small (its running and fetched-ahead jobs,
// buffers) and every job allocates: collecting at 5x the live heap rather
// than 2x spends less CPU per job. Left alone, that lets a worker with
// 10 KB jobs reach several times its live heap in RSS. The soft limit
// (runtime/debug.SetMemoryLimit) is max(Floor, LiveFactor x live heap),
// set again after every collection: small heaps grow up to Floor, larger
// ones up to three times what is live, and a live heap that grows moves
// the limit with it, so the collector never runs continuously to hold a
// limit the program has outgrown. docs/benchmarks.md gives the peak RSS
// this yields.
package gctune

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

const (
	// GCPercent is GOGC.
	GCPercent = 400
	// Floor is the lowest soft memory limit, in bytes.
	Floor = 16 << 20
	// LiveFactor is the limit over the live heap.
	LiveFactor = 3
)

var once sync.Once

// Apply sets GOGC and the following soft memory limit for this process,
// unless the environment sets GOGC or GOMEMLIMIT (the operator's choice
// wins). Calls after the first do nothing.
func Apply() {
	once.Do(func() {
		if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
			return
		}
		debug.SetGCPercent(GCPercent)
		debug.SetMemoryLimit(Floor)
		arm()
	})
}

// live reads the heap that the last collection found live.
var liveSample = []metrics.Sample{{Name: "/gc/heap/live:bytes"}}

// Limit is the soft memory limit for a live heap of live bytes.
func Limit(live uint64) int64 { return max(Floor, int64(live)*LiveFactor) }

// arm sets the limit after the next collection: a finalizer runs once the
// collector has found its object unreachable, then arms the next one.
func arm() {
	runtime.SetFinalizer(new([16]byte), func(*[16]byte) {
		metrics.Read(liveSample)
		if v := liveSample[0].Value; v.Kind() == metrics.KindUint64 {
			debug.SetMemoryLimit(Limit(v.Uint64()))
		}
		arm()
	})
}
