package typed_test

import (
	"testing"

	"github.com/gojob/gojob/internal/fetchedjob"
	"github.com/gojob/gojob/sidekiq/typed"
	"github.com/gojob/gojob/sidekiq/wire"
)

// BenchmarkDecode measures what a typed handler adds to a job: decoding
// its arguments, for positional arguments and for one hash, from a job
// fetched (lazily parsed) as the server hands it over.
func BenchmarkDecode(b *testing.B) {
	pos := []byte(`{"retry":true,"queue":"default","args":[42,9.5,"eur"],"class":"ChargeJob","jid":"0123456789abcdef01234567","created_at":1700000000.0,"enqueued_at":1700000000.0}`)
	hash := []byte(`{"retry":true,"queue":"default","args":[{"user_id":42,"plan":"pro","price":9.5,"tags":["a","b"],"address":{"city":"Oslo","zip":null}}],"class":"SignupJob","jid":"0123456789abcdef01234567","created_at":1700000000.0,"enqueued_at":1700000000.0}`)
	b.Run("positional", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			j, _ := fetchedjob.Parse[wire.Job](pos)
			if _, err := typed.Decode[Charge](j); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("hash", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			j, _ := fetchedjob.Parse[wire.Job](hash)
			if _, err := typed.Decode[Signup](j); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parse-only", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			j, _ := fetchedjob.Parse[wire.Job](hash)
			_ = j.Args()
		}
	})
}
