// Package gctune sets the garbage collector of a gojob process: a high
// GOGC, for little GC work per job, bounded by a soft memory limit that
// follows the live heap, so that a worker whose live heap is a few MB does
// not grow to five times it.
//
// A worker's live heap is small (its running and fetched-ahead jobs,
// buffers) and every job allocates: collecting at 5x the live heap rather
// than 2x spends less CPU per job. Left alone, that lets a worker with
// 10 KB jobs reach several times its live heap in RSS. The soft limit
// (runtime/debug.SetMemoryLimit) is the memory the runtime holds besides
// the heap (stacks, its own structures) plus max(HeapFloor, LiveFactor x
// live heap), set again after every collection: small heaps grow up to
// HeapFloor, larger ones up to three times what is live, and a live heap
// that grows moves the limit with it, so the collector never runs
// continuously to hold a limit the program has outgrown. The memory
// besides the heap is counted apart because the limit covers all of the
// runtime's memory: without it, a program with a few MB of stacks and
// buffers would collect far more often than the factor says.
// docs/benchmarks.md gives the peak RSS this yields.
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
	// HeapFloor is the heap the limit allows at the least, in bytes. A
	// worker of small jobs has a live heap of a few MB, so this floor sets
	// how often it collects: at 14 MiB rather than 12, `gojob work` spent
	// about 5% less CPU per job for about 2 MB more peak RSS, 20 MB of
	// which are the binary's pages; 16 MiB saved no more CPU
	// (docs/benchmarks.md, "Memory").
	HeapFloor = 14 << 20
	// LiveFactor is the heap the limit allows over the live heap.
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
		debug.SetMemoryLimit(HeapFloor + 8<<20) // until the first collection measures the rest
		arm()
	})
}

// samples are what the limit is made of: the heap the last collection
// found live, the memory the runtime has mapped in all, and the heap's
// share of it.
var samples = []metrics.Sample{
	{Name: "/gc/heap/live:bytes"},
	{Name: "/memory/classes/total:bytes"},
	{Name: "/memory/classes/heap/objects:bytes"},
	{Name: "/memory/classes/heap/unused:bytes"},
	{Name: "/memory/classes/heap/free:bytes"},
	{Name: "/memory/classes/heap/released:bytes"},
}

// Limit is the soft memory limit for a live heap of live bytes beside
// overhead bytes of memory that is not heap (stacks, the runtime's own).
func Limit(live, overhead uint64) int64 {
	return int64(overhead) + max(HeapFloor, int64(live)*LiveFactor)
}

// arm sets the limit after the next collection: a finalizer runs once the
// collector has found its object unreachable, then arms the next one.
func arm() {
	runtime.SetFinalizer(new([16]byte), func(*[16]byte) {
		metrics.Read(samples)
		var v [6]uint64
		for i, s := range samples {
			if s.Value.Kind() != metrics.KindUint64 {
				arm()
				return
			}
			v[i] = s.Value.Uint64()
		}
		heap := v[2] + v[3] + v[4] + v[5]
		overhead := uint64(0)
		if v[1] > heap {
			overhead = v[1] - heap
		}
		debug.SetMemoryLimit(Limit(v[0], overhead))
		arm()
	})
}
