package fetch

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
)

// Which queue a move takes from. BasicFetch asks Redis once per job, with
// one `BRPOP` over all queues: the first non-empty one in strict order, or
// in a weighted shuffle. A move (LMOVE) names one queue, so the reliable
// fetch keeps what each queue last showed: a queue is believed to have
// jobs until a move from it finds it empty, and then believed empty until
// its waker sees a job in it. Each idle slot moves from the first queue
// believed to have jobs (strict), or from one drawn by weight among them
// (weighted, which is the first non-empty queue of Sidekiq's per-fetch
// shuffle). A queue that empties costs one move that finds nothing.
//
// Waking. Redis cannot block a client on several lists without taking a
// job out of them, and a job taken by BRPOP would be only in this
// process's memory until it reached an in-progress list. So each queue
// believed empty has a connection blocked in
//
//	BLMOVE queue:q queue:q RIGHT RIGHT 2
//
// (BRPOPLPUSH queue:q queue:q 2 before Redis 6.2), which returns as soon as
// the queue has a job and moves it from its pop end back to its pop end:
// the job never leaves the queue and keeps its place. The waker then marks
// the queue as having jobs and wakes the parked takers. A job pushed to
// any queue starts within two round trips, whichever queue it is in, and
// a job pushed to a strict queue ahead of the one being drained is taken
// next. Before Redis 6.2, BRPOPLPUSH puts the woken job at the push end of
// its queue, which changes its order only when several jobs arrive at
// once. Closing a waker's connection at quiet is safe at any moment.
//
// A waker only watches: beside other processes blocked on the queue, the
// job it sees goes to the next of them. The idle slots therefore also wait
// with blocking moves into lists of their own (idle.go).

// queueState is what the fetch knows of one queue.
type queueState struct {
	key    string // "queue:<name>"
	name   string
	i      int // its index in queues.list
	weight int // max(weight, 1), summed over repeats
	// empty: a move found the queue empty and no job was seen since.
	empty atomic.Bool
	// seen counts the waker's sightings of a job: a move's "empty" that
	// was sent before the latest sighting is out of date.
	seen atomic.Uint64
	// watch is signalled when the queue is marked empty.
	watch chan struct{}
	owner *queues
}

// markEmpty marks q empty after a move sent when seen was at. It reports
// whether it did (a sighting since makes the move's answer stale).
func (q *queueState) markEmpty(at uint64) bool {
	if q.seen.Load() != at {
		return false
	}
	if !q.empty.Swap(true) {
		signal(q.watch)
		q.owner.dried()
	}
	return true
}

// queues is the fetch's state of its queues and their wakers.
type queues struct {
	cfg    *Config
	moveOK bool
	list   []*queueState // in configuration order, each queue once
	strict bool

	mu    sync.Mutex
	woken chan struct{} // closed when a queue may have jobs again
	dry   chan struct{} // closed when a queue is marked empty
	// onWake is told which queue a waker saw a job in (the blockers).
	onWake  func(q *queueState)
	stopped bool
	conns   map[string]redis.Conn // the wakers' connections while blocked
	done    sync.WaitGroup
}

func newQueues(cfg *Config, moveOK bool) *queues {
	qs := &queues{cfg: cfg, moveOK: moveOK, strict: cfg.Order.Strict(), woken: make(chan struct{}),
		dry: make(chan struct{}), conns: map[string]redis.Conn{}}
	count := map[string]int{}
	for _, k := range cfg.Order.Weighted() {
		count[k]++
	}
	for _, name := range cfg.Order.Names() {
		k := contract.QueueKey(name)
		qs.list = append(qs.list, &queueState{key: k, name: name, i: len(qs.list), weight: count[k], watch: make(chan struct{}, 1), owner: qs})
	}
	return qs
}

// start starts the wakers.
func (qs *queues) start() {
	for _, q := range qs.list {
		qs.done.Add(1)
		go qs.watch(q)
	}
}

// stop ends the wakers: their blocked commands are cut off by closing
// their connections (safe: a waker's move leaves the job in its queue).
func (qs *queues) stop() {
	qs.mu.Lock()
	qs.stopped = true
	for _, c := range qs.conns {
		c.Close()
	}
	qs.mu.Unlock()
	for _, q := range qs.list {
		signal(q.watch)
	}
	qs.done.Wait()
}

// pick returns the queue a slot moves its next job from, and the sighting
// count to mark it empty with; nil when every queue is believed empty or
// paused.
func (qs *queues) pick(r *rand.Rand) (*queueState, uint64) {
	if qs.strict {
		for _, q := range qs.list {
			at := q.seen.Load()
			if !q.empty.Load() && !qs.cfg.Order.Paused(q.name) {
				return q, at
			}
		}
		return nil, 0
	}
	total := 0
	for _, q := range qs.list {
		if !q.empty.Load() && !qs.cfg.Order.Paused(q.name) {
			total += q.weight
		}
	}
	if total == 0 {
		return nil, 0
	}
	n := r.IntN(total)
	for _, q := range qs.list {
		if q.empty.Load() || qs.cfg.Order.Paused(q.name) {
			continue
		}
		if n < q.weight {
			return q, q.seen.Load()
		}
		n -= q.weight
	}
	return nil, 0
}

// wokeChan returns the channel closed when a queue may have jobs again.
func (qs *queues) wokeChan() <-chan struct{} { return qs.signal(&qs.woken) }

// wake wakes the parked takers.
func (qs *queues) wake() { qs.broadcast(&qs.woken) }

// driedChan returns the channel closed when a queue is next marked empty.
func (qs *queues) driedChan() <-chan struct{} { return qs.signal(&qs.dry) }

// dried wakes those waiting for a queue to be marked empty.
func (qs *queues) dried() { qs.broadcast(&qs.dry) }

// signal returns the channel *ch holds: broadcast closes it.
func (qs *queues) signal(ch *chan struct{}) <-chan struct{} {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	return *ch
}

// broadcast wakes those waiting on *ch and puts a new channel in its place.
func (qs *queues) broadcast(ch *chan struct{}) {
	qs.mu.Lock()
	close(*ch)
	*ch = make(chan struct{})
	qs.mu.Unlock()
}

// watch is the waker of q: while q is believed empty (and not paused), it
// blocks until q has a job, then marks it and wakes the takers.
func (qs *queues) watch(q *queueState) {
	defer qs.done.Done()
	cfg := qs.cfg
	fc := &conn{cfg: cfg, watcher: true}
	defer fc.close()
	for {
		if !q.empty.Load() {
			select {
			case <-q.watch:
				continue
			case <-cfg.Quiet:
				return
			}
		}
		if cfg.quiet() || qs.isStopped() {
			return
		}
		if cfg.Order.Paused(q.name) {
			// Its jobs are not taken: watching would wake the takers for
			// nothing. Look again after a while.
			if !cfg.sleepOrQuiet(pausePoll) {
				return
			}
			continue
		}
		if !fc.ready() || !qs.register(q.key, fc.c) {
			return
		}
		at := q.seen.Load()
		var v any
		var err error
		sent := time.Now()
		if qs.moveOK {
			v, err = fc.c.Do("BLMOVE", q.key, q.key, "RIGHT", "RIGHT", cfg.blockSeconds())
		} else {
			v, err = fc.c.Do("BRPOPLPUSH", q.key, q.key, cfg.blockSeconds())
		}
		if !qs.unregister(q.key) {
			return
		}
		if err != nil {
			if !fc.failed(err) {
				return
			}
			continue
		}
		fc.ok(sent)
		if v != nil && q.seen.CompareAndSwap(at, at+1) {
			q.empty.Store(false)
			qs.wake()
			if qs.onWake != nil {
				qs.onWake(q)
			}
		}
	}
}

func (qs *queues) isStopped() bool {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	return qs.stopped
}

// register records the connection a waker is about to block on, so that
// stop can cut it off; false when stopping.
func (qs *queues) register(key string, c redis.Conn) bool {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qs.stopped {
		return false
	}
	qs.conns[key] = c
	return true
}

func (qs *queues) unregister(key string) bool {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	delete(qs.conns, key)
	return !qs.stopped
}
