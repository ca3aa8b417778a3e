package fetch

import (
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gojob/gojob/internal/contract"
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

	// paused holds the "queue:<name>" keys of this order's paused queues
	// (docs/queue-pause.md) and of its full ones (SetFull); nil or empty
	// when none is. The fetch skips them all alike.
	paused atomic.Pointer[map[string]bool]

	// mu guards the two sources of paused.
	mu        sync.Mutex
	pausedSet map[string]bool // SetPaused's keys
	full      map[string]bool // SetFull's keys
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
			f.weighted = append(f.weighted, contract.QueueKey(q.Name))
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
		f.fixed = append(f.fixed, contract.QueueKey(q))
	}
	f.fixed = append(f.fixed, Timeout)
	return f
}

// SetPaused sets the paused queues (names; others than this order's are
// ignored) and reports whether the set changed.
func (f *Order) SetPaused(names []string) bool {
	next := map[string]bool{}
	for _, n := range names {
		for _, q := range f.unique {
			if q == n {
				next[contract.QueueKey(n)] = true
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.pausedSet) == len(next) {
		same := true
		for k := range next {
			if !f.pausedSet[k] {
				same = false
			}
		}
		if same {
			return false
		}
	}
	f.pausedSet = next
	f.store()
	return true
}

// SetFull marks queue (a name) full, or not: this process runs as many of
// its jobs as it may (ServerConfig.QueueConcurrency), so the fetch skips
// it as it skips a paused queue.
func (f *Order) SetFull(queue string, full bool) {
	k := contract.QueueKey(queue)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.full[k] == full {
		return
	}
	if f.full == nil {
		f.full = map[string]bool{}
	}
	if full {
		f.full[k] = true
	} else {
		delete(f.full, k)
	}
	f.store()
}

// store publishes the union of the paused and full queues; f.mu is held.
func (f *Order) store() {
	next := make(map[string]bool, len(f.pausedSet)+len(f.full))
	for k := range f.pausedSet {
		next[k] = true
	}
	for k := range f.full {
		next[k] = true
	}
	f.paused.Store(&next)
}

// PausedByRedis reports whether queue (a name) is paused through
// contract.KeyPausedQueues, as opposed to full.
func (f *Order) PausedByRedis(queue string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pausedSet[contract.QueueKey(queue)]
}

// Paused reports whether queue (a name) is paused.
func (f *Order) Paused(queue string) bool {
	p := f.paused.Load()
	// Runs for every job: no key built while nothing is paused.
	return p != nil && len(*p) > 0 && (*p)[contract.QueueKey(queue)]
}

// AllPaused reports whether every queue of the order is paused.
func (f *Order) AllPaused() bool {
	p := f.paused.Load()
	return p != nil && len(*p) > 0 && len(*p) == len(f.unique)
}

// pausePoll is how often a fetch with every queue paused looks again.
const pausePoll = 100 * time.Millisecond

// WaitUnpaused blocks while every queue is paused; it returns false when
// quiet closes first.
func (f *Order) WaitUnpaused(quiet <-chan struct{}) bool {
	for f.AllPaused() {
		select {
		case <-quiet:
			return false
		case <-time.After(pausePoll):
		}
	}
	return true
}

// Args returns the BRPOP arguments (keys and timeout) for one fetch,
// without paused queues (unless every queue is: see WaitUnpaused).
func (f *Order) Args(r *rand.Rand) []any {
	if p := f.paused.Load(); p != nil && len(*p) > 0 && len(*p) < len(f.unique) {
		return f.unpausedArgs(r, *p)
	}
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

func (f *Order) unpausedArgs(r *rand.Rand, paused map[string]bool) []any {
	var keys []string
	if f.strict {
		for _, q := range f.unique {
			keys = append(keys, contract.QueueKey(q))
		}
	} else {
		keys = make([]string, len(f.weighted))
		copy(keys, f.weighted)
		r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	}
	out := make([]any, 0, len(f.unique)+1)
	seen := make(map[string]bool, len(f.unique))
	for _, k := range keys {
		if !seen[k] && !paused[k] {
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

// Timeout is BasicFetch's BRPOP timeout in seconds.
const Timeout = 2
