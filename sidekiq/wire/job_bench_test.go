package wire_test

import (
	"testing"

	"github.com/gojob/gojob/internal/fetchedjob"
	"github.com/gojob/gojob/sidekiq/wire"
)

var benchPayload = []byte(`{"retry":true,"queue":"default","args":[1,"two",{"three":3.5,"é":[null,true,1.0e+16]}],"class":"HardJob","jid":"2192851646718f18b780163c","created_at":1795296573.1651707,"enqueued_at":1795296573.165405}`)

// BenchmarkParseJob is the per-job decode cost on the fetch path.
func BenchmarkParseJob(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchPayload)))
	for b.Loop() {
		if _, err := wire.ParseJob(benchPayload); err != nil {
			b.Fatal(err)
		}
	}
}

// typicalPayload is what Client.Push writes for a one-argument job (the
// Sidekiq 6 format, as gojob bench pushes).
var typicalPayload = []byte(`{"retry":true,"queue":"default","class":"BenchJob","args":[7],"jid":"90d9c26b6665a3d4675fced3","created_at":1795492991.0632136,"enqueued_at":1795492991.0633917}`)

// BenchmarkParseJobTypical is the decode cost of a typical small job.
func BenchmarkParseJobTypical(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(typicalPayload)))
	for b.Loop() {
		if _, err := wire.ParseJob(typicalPayload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeJob is the Ruby-exact re-encoding (retry entries, pushes).
func BenchmarkEncodeJob(b *testing.B) {
	job, err := wire.ParseJob(benchPayload)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	m := job.Map()
	for b.Loop() {
		_ = m.Encode()
	}
}

// BenchmarkNewJob builds a payload from Go values, as Client.Push callers do.
func BenchmarkNewJob(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := wire.NewJob("HardJob", 1, "two", map[string]any{"three": 3.5}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseFetchedTypical is the fetch path's decode, whose strings
// share the reply buffer instead of copying it.
func BenchmarkParseFetchedTypical(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(typicalPayload)))
	for b.Loop() {
		if _, err := fetchedjob.Parse[wire.Job](typicalPayload); err != nil {
			b.Fatal(err)
		}
	}
}
