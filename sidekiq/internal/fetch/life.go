package fetch

import (
	"errors"
	"math/rand/v2"
	"time"

	"github.com/gojob/gojob/sidekiq/internal/redisx"
)

// The reliable fetch's life goroutine: it renews the heartbeats, sweeps
// the own lists, runs the orphan recovery passes (recovery_orphans.go) and
// acts on a change of master (master.go).

// start runs the heartbeats and the recovery in the background.
func (l *reliableLife) start(*redisx.Retrier) error {
	go l.run()
	return nil
}

func (l *reliableLife) run() {
	defer close(l.done)
	beat := time.NewTicker(heartbeatInterval)
	defer beat.Stop()
	age := time.NewTicker(time.Second)
	defer age.Stop()
	next := time.NewTimer(0) // the first pass at once: this host's predecessors
	defer next.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-beat.C:
			l.beat()
		case <-l.changed:
			l.onChanged()
		case <-age.C:
			l.ids.age()
			l.sweepSoon()
		case <-next.C:
			if err := l.pass(l.stop); err != nil && !errors.Is(err, errStopping) {
				l.cfg.Logger.Warn().Err(err).Str("component", "recovery").Msg("orphan recovery pass failed")
			}
			next.Reset(l.interval/2 + rand.N(l.interval))
		}
	}
}

// beat renews the heartbeats of the list identities and reads the run_id
// of the Redis it reaches (master.go). A renewal that finds a key gone
// means other processes may have taken this one for dead and recovered
// its jobs, or that Redis lost its data: the epoch ends (no position is
// trusted any more). The renewal has just written every key again, so the
// moves go on at once, into lists of identities of the new epoch.
func (l *reliableLife) beat() {
	gone, id, ok := l.renew(true)
	if !ok {
		return
	}
	if id != "" && l.master.observe(id) {
		l.moved()
	}
	if l.master.takePending() {
		l.reportChange(gone)
		return
	}
	if gone {
		if !l.expiredLogged {
			l.expiredLogged = true
			l.cfg.Logger.Error().Str("component", "fetch").Str("identity", l.cfg.Identity).
				Msg("this process's reliable-fetch heartbeat had expired (was it stopped for a minute?); other processes may have recovered, and will run again, the jobs it is running")
		}
		return
	}
	l.expiredLogged = false
}

// onChanged reports a change of master that a fetch connection saw.
func (l *reliableLife) onChanged() {
	if !l.master.takePending() {
		return // the renewal reported it
	}
	// Each pooled connection to the Redis that went away fails once, and
	// is dropped: a later one reaches the new Redis.
	var gone, ok bool
	for deadline := time.Now().Add(renewFor); ; {
		if gone, _, ok = l.renew(false); ok || time.Now().After(deadline) {
			break
		}
		select {
		case <-l.stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	if !ok {
		l.master.mu.Lock()
		l.master.pending = true // the next renewal reports it
		l.master.mu.Unlock()
		return
	}
	l.reportChange(gone)
}

// reportChange logs a change of master, marks the identities whose lists
// Redis lost (lost), and makes the sweeps quick for a while.
func (l *reliableLife) reportChange(lost bool) {
	prev, cur := l.master.ids()
	l.quickUntil = time.Now().Add(quickSweepFor)
	l.candidates = nil
	l.expiredLogged = false
	log := l.cfg.Logger.Warn()
	msg := "redis master changed (a Sentinel promotion, or a restart): this process checks its in-progress lists there and gives back to their queues the jobs no slot runs"
	if lost {
		l.lostMu.Lock()
		for _, li := range l.ids.snapshot() {
			if !l.ids.current(li) {
				l.lost[li.id] = true
			}
		}
		l.lostMu.Unlock()
		log = l.cfg.Logger.Error()
		msg = "redis lost its data (a restart without persistence, or a promoted replica without it): the in-progress lists of the jobs running now are gone with it; those jobs finish, and new jobs are taken at once"
	}
	log.Str("component", "fetch").Str("run_id", short(cur)).Str("previous_run_id", short(prev)).Msg(msg)
	l.sweepSoon()
}
