package sidekiq

import (
	"errors"
	"strings"

	"github.com/gomodule/redigo/redis"
)

// FetchMode selects how jobs are taken from the queues.
type FetchMode int

const (
	// FetchBRPOP is Sidekiq's BasicFetch: every idle concurrency slot has
	// one `BRPOP queue:a queue:b … 2` in Redis, one BRPOP per job. The
	// BRPOPs of up to ServerConfig.FetchPipeline slots share a connection
	// as a pipeline (see fetch_pipe.go).
	FetchBRPOP FetchMode = iota
	// FetchBatch takes, in one `BLMPOP 2 n queue:a … RIGHT COUNT k`
	// (Redis 7.0+), as many jobs as there are idle slots, from the first
	// non-empty queue in the same order BRPOP would use. A job is only
	// popped when a slot is free to run it, so a crash loses exactly what
	// BasicFetch loses (the jobs being run), but a busy process needs far
	// fewer round trips. On a Redis without BLMPOP it falls back to
	// FetchBRPOP.
	FetchBatch
)

// ParseFetchMode reads "brpop" or "batch".
func ParseFetchMode(s string) (FetchMode, error) {
	switch strings.ToLower(s) {
	case "", "brpop", "basic":
		return FetchBRPOP, nil
	case "batch", "blmpop":
		return FetchBatch, nil
	}
	return 0, errors.New("sidekiq: fetch mode must be brpop or batch")
}

type fetched struct {
	queue string
	raw   []byte
}

// batchFetchLoop is the single fetcher of FetchBatch. It owns the idle-slot
// tokens: it pops at most as many jobs as slots are free and hands each to
// a worker.
func (s *Server) batchFetchLoop(jobs chan<- fetched, idle chan struct{}) {
	defer s.wg.Done()
	defer close(jobs)
	r := newRand(uint64(s.cfg.Concurrency))
	fc := &fetchConn{s: s}
	defer fc.close()
	giveBack := func(n int) {
		for i := 0; i < n; i++ {
			idle <- struct{}{}
		}
	}
	for {
		// Wait for one free slot, then take every other free one.
		select {
		case <-idle:
		case <-s.quietCh:
			return
		}
		k := 1
	more:
		for k < s.cfg.Concurrency {
			select {
			case <-idle:
				k++
			default:
				break more
			}
		}
		if s.IsQuiet() || !fc.ready() {
			return
		}
		keys := s.fetchQ.args(r)
		args := make([]any, 0, len(keys)+4)
		args = append(args, fetchTimeout, len(keys)-1)
		args = append(args, keys[:len(keys)-1]...)
		args = append(args, "RIGHT", "COUNT", k)
		reply, err := redis.Values(fc.conn.Do("BLMPOP", args...))
		if errors.Is(err, redis.ErrNil) {
			giveBack(k)
			fc.ok()
			continue
		}
		if err != nil {
			giveBack(k)
			if !fc.failed(err) {
				return
			}
			continue
		}
		fc.ok()
		if len(reply) != 2 {
			giveBack(k)
			continue
		}
		key, _ := redis.String(reply[0], nil)
		elems, _ := redis.ByteSlices(reply[1], nil)
		queue := QueueName(key)
		giveBack(k - len(elems))
		for i, e := range elems {
			if s.IsQuiet() {
				// Push the rest back in one RPUSH, last popped first, so
				// the queue keeps its order (the first popped runs next).
				s.requeue(queue, reversed(elems[i:])...)
				giveBack(len(elems) - i)
				break
			}
			jobs <- fetched{queue: queue, raw: e}
		}
	}
}

// batchWorker runs jobs handed over by the batch fetcher.
func (s *Server) batchWorker(slot int, jobs <-chan fetched, idle chan<- struct{}) {
	defer s.wg.Done()
	tid := tidFor(slot)
	for f := range jobs {
		s.process(tid, f.queue, f.raw)
		idle <- struct{}{}
	}
}

// supportsBLMPOP asks Redis whether it knows BLMPOP (7.0+).
func (s *Server) supportsBLMPOP() bool {
	conn := s.cfg.Pool.Get()
	defer conn.Close()
	reply, err := redis.Values(conn.Do("COMMAND", "INFO", "BLMPOP"))
	return err == nil && len(reply) == 1 && reply[0] != nil
}

// startFetchers starts the fetch goroutines of the configured mode.
func (s *Server) startFetchers() {
	if s.cfg.Fetch == FetchBatch {
		if s.supportsBLMPOP() {
			n := s.cfg.Concurrency
			jobs := make(chan fetched, n)
			idle := make(chan struct{}, n)
			for i := 0; i < n; i++ {
				idle <- struct{}{}
				s.wg.Add(1)
				go s.batchWorker(i, jobs, idle)
			}
			s.wg.Add(1)
			go s.batchFetchLoop(jobs, idle)
			return
		}
		s.log.Warn().Msg("this Redis has no BLMPOP (Redis < 7.0): using BRPOP fetch")
	}
	s.startBRPOPFetch()
}
