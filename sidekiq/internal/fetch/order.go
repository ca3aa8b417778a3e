package fetch

import (
	"math/rand/v2"
	"strings"
	"time"

	"github.com/gojob/gojob/sidekiq/wire"
)

// Order builds the BRPOP key list as Sidekiq's BasicFetch does
// (docs/sidekiq-wire.md#fetch): strict (config order) when no queue has a
// weight (7.0.0-7.0.2: when the weighted list has no duplicates), otherwise
// a fresh weighted shuffle with duplicates removed on every fetch.
type Order struct {
	strict   bool
	unique   []string // queue names in config order, unique
	weighted []string // "queue:<name>" repeated max(weight,1) times
	fixed    []any    // BRPOP args for strict mode, timeout included
}

// NewOrder returns the order of qs for the fetch of Sidekiq v.
func NewOrder(qs []wire.QueueWeight, v wire.Version) *Order {
	f := &Order{strict: true}
	// 7.0.0-7.0.2 (fetch.rb): strict when the weighted list has no
	// duplicates; 6.4 (cli.rb#parse_queue) and 7.0.3+ (capsule mode
	// :strict): when every weight is 0.
	dupStrict := v.AtLeast(7, 0, 0) && !v.AtLeast(7, 0, 3)
	seen := map[string]bool{}
	for _, q := range qs {
		if q.Weight > 0 {
			f.strict = false
		}
		n := max(q.Weight, 1)
		for i := 0; i < n; i++ {
			f.weighted = append(f.weighted, wire.QueueKey(q.Name))
		}
		if !seen[q.Name] {
			seen[q.Name] = true
			f.unique = append(f.unique, q.Name)
		}
	}
	if dupStrict {
		f.strict = len(f.weighted) == len(f.unique)
	}
	for _, q := range f.unique {
		f.fixed = append(f.fixed, wire.QueueKey(q))
	}
	f.fixed = append(f.fixed, Timeout)
	return f
}

// Args returns the BRPOP arguments (keys and timeout) for one fetch.
func (f *Order) Args(r *rand.Rand) []any {
	if f.strict {
		return f.fixed
	}
	keys := make([]string, len(f.weighted))
	copy(keys, f.weighted)
	r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	out := make([]any, 0, len(f.unique)+1)
	seen := make(map[string]bool, len(f.unique))
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return append(out, Timeout)
}

// Strict reports whether the queues are always tried in config order.
func (f *Order) Strict() bool { return f.strict }

// Names returns the queue names in config order, each once.
func (f *Order) Names() []string { return f.unique }

// Weighted returns the "queue:<name>" keys, each repeated by its weight.
func (f *Order) Weighted() []string { return f.weighted }

func (f *Order) String() string {
	if f.strict {
		return strings.Join(f.unique, ",") + " (strict)"
	}
	return strings.Join(f.unique, ",") + " (weighted)"
}

// NewRand returns a slot's shuffle source.
func NewRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), seed))
}
