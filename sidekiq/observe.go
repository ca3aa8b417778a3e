package sidekiq

import "time"

// JobObserver is told about every job the server finishes (metrics
// exporters; package metrics). JobDone runs on the job's slot after its
// outcome is written: it must be quick and must not block.
type JobObserver interface {
	// JobDone reports a finished job: err is nil for a success, an
	// *OverLimitError for a job rescheduled by a limiter, otherwise its
	// failure. class is "" for a payload that could not be parsed.
	JobDone(queue, class string, took time.Duration, err error)
}

// Observe adds observers; call it before Start.
func (s *Server) Observe(o ...JobObserver) { s.observers = append(s.observers, o...) }

func (s *Server) observe(queue, class string, took time.Duration, err error) {
	for _, o := range s.observers {
		o.JobDone(queue, class, took, err)
	}
}

// Busy returns how many jobs run now.
func (s *Server) Busy() int { return int(s.busy.Load()) }

// Concurrency returns the number of slots.
func (s *Server) Concurrency() int { return s.cfg.Concurrency }

// Running reports whether the server has started and not stopped.
func (s *Server) Running() bool { return s.state.Load() == stateRunning }

// RedisDown reports whether the server is in a Redis outage (its last
// command failed and none has succeeded since).
func (s *Server) RedisDown() bool { return s.outage.Down() }

// FetchStats are the counters of a server's fetch and Redis connections.
type FetchStats struct {
	// Recovered is how many jobs this process pushed back to their queue
	// from the in-progress lists of processes that are gone (reliable fetch).
	Recovered int64
	// PoisonPills is how many recovered jobs it moved to the dead set
	// instead, recovered too often.
	PoisonPills int64
	// RedisErrors is how many Redis commands failed; RedisOutages how many
	// outages began (a failure or a stall after a success).
	RedisErrors, RedisOutages int64
}

// FetchStats returns the fetch and Redis counters.
func (s *Server) FetchStats() FetchStats {
	errs, outages := s.outage.Counts()
	return FetchStats{
		Recovered:    s.fetchStats.Recovered.Load(),
		PoisonPills:  s.fetchStats.PoisonPills.Load(),
		RedisErrors:  errs,
		RedisOutages: outages,
	}
}
