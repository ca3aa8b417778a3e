package fetch

import (
	"sync"

	"github.com/gomodule/redigo/redis"
)

// acker takes finished jobs out of their in-progress lists: one LREM per
// job, pipelined in batches on a connection of its own. An acknowledgement
// never waits behind a blocked fetch, so a job that has finished stays in
// flight (and would run again if the process died) for one round trip.
type acker struct {
	cfg  *Config
	life *reliableLife
	in   chan Unit
	done sync.WaitGroup

	// closeMu orders sends on in against its close: senders hold it for
	// reading.
	closeMu sync.RWMutex
	closed  bool

	mu      sync.Mutex
	pending map[string]map[string]int // queued or in flight, not yet confirmed
}

func newAcker(cfg *Config, life *reliableLife, n int) *acker {
	return &acker{cfg: cfg, life: life, in: make(chan Unit, 2*n), pending: map[string]map[string]int{}}
}

// start runs the acknowledgements until close.
func (a *acker) start() {
	a.done.Add(1)
	go a.run()
}

// add queues the acknowledgement of u; after close it is sent at once.
func (a *acker) add(u Unit) error {
	a.closeMu.RLock()
	defer a.closeMu.RUnlock()
	if a.closed {
		return a.send([]Unit{u})
	}
	a.mu.Lock()
	add(a.pending, u.list, u.Raw)
	a.mu.Unlock()
	a.in <- u
	return nil
}

// close ends the acknowledgements once those queued are sent.
func (a *acker) close() {
	a.closeMu.Lock()
	if !a.closed {
		a.closed = true
		close(a.in)
	}
	a.closeMu.Unlock()
	a.done.Wait()
}

// held adds the jobs whose acknowledgement is not confirmed to in.
func (a *acker) held(in map[string]map[string]int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for list, raws := range a.pending {
		for raw, n := range raws {
			if in[list] == nil {
				in[list] = map[string]int{}
			}
			in[list][raw] += n
		}
	}
}

func (a *acker) run() {
	defer a.done.Done()
	batch := make([]Unit, 0, 256)
	for u := range a.in {
		batch = append(batch[:0], u)
	more:
		for len(batch) < cap(batch) {
			select {
			case u, ok := <-a.in:
				if !ok {
					break more
				}
				batch = append(batch, u)
			default:
				break more
			}
		}
		a.send(batch)
		a.mu.Lock()
		for _, u := range batch {
			if m := a.pending[u.list]; m != nil {
				if m[string(u.Raw)]--; m[string(u.Raw)] <= 0 {
					delete(m, string(u.Raw))
				}
			}
		}
		a.mu.Unlock()
		clear(batch)
	}
}

// send sends the LREMs of units in one pipeline, through an outage.
func (a *acker) send(units []Unit) error {
	var replies []any
	err := a.cfg.Writes.Do(func(conn redis.Conn) error {
		for _, u := range units {
			conn.Send("LREM", u.list, -1, u.Raw)
		}
		var err error
		replies, err = redis.Values(conn.Do(""))
		return err
	})
	if err != nil {
		a.cfg.Logger.Error().Err(err).Str("component", "fetch").Int("jobs", len(units)).
			Msg("could not acknowledge finished jobs; they stay in the in-progress list and run again if this process dies")
		return err
	}
	for i, r := range replies {
		if n, _ := redis.Int(r, nil); n == 0 && i < len(units) {
			a.life.notOwned(units[i].list, units[i].Raw)
		}
	}
	return nil
}
