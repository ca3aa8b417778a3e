package fetch

import (
	"errors"
	"sync"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
)

// brpopFetch is Sidekiq's BasicFetch: every idle concurrency slot has
// exactly one `BRPOP queue:a queue:b … 2` in Redis, and a job is popped
// only for a slot that is free to run it, so a crash loses what BasicFetch
// loses (the jobs being run) and nothing else. Ruby gives each processor
// thread its own round trips; gojob carries the BRPOPs of up to
// Config.Pipeline idle slots on one connection (pipes).
type brpopFetch struct {
	cfg   *Config
	pipes *pipes
	wg    sync.WaitGroup // slots, pipes and their watch
}

// NewBRPOP returns the pipelined BasicFetch.
func NewBRPOP(cfg *Config) Fetcher {
	return &brpopFetch{cfg: cfg, pipes: newPipes(cfg, cfg.Concurrency)}
}

// Start starts the slots and their pipes.
func (f *brpopFetch) Start() {
	f.pipes.start(&f.wg)
	for i := 0; i < f.cfg.Concurrency; i++ {
		f.wg.Add(1)
		go f.slot(i)
	}
}

// Wait blocks until the slots and the pipes have returned.
func (f *brpopFetch) Wait() { f.wg.Wait() }

// Depth returns how many BRPOPs each connection carries at most.
func (f *brpopFetch) Depth() int { return f.pipes.depth }

// Requeue pushes unfinished jobs back with one RPUSH per queue.
func (f *brpopFetch) Requeue(units []Unit) error { return f.cfg.bulkRequeue(units) }

// Finish writes a failed job's retry or dead entry; nothing else keeps a
// job in Redis while it runs.
func (f *brpopFetch) Finish(u Unit, o *Outcome) error { return f.cfg.writeOutcome(o) }

// slot is one concurrency slot: it BRPOPs a job through the pipes, runs
// it, and repeats until the server is quiet.
func (f *brpopFetch) slot(i int) {
	defer f.wg.Done()
	cfg := f.cfg
	r := NewRand(uint64(i))
	req := &fetchReq{cmds: make([]pipeCmd, 1), decode: brpopReply, reply: make(chan fetchReply, 1)}
	for {
		if !cfg.Order.WaitUnpaused(cfg.Quiet) {
			return
		}
		req.cmds[0] = pipeCmd{"BRPOP", cfg.Order.Args(r)}
		rep, ok := f.pipes.do(req)
		if !ok {
			return
		}
		if !rep.ok {
			continue // timeout, or an error the pipe is backing off from
		}
		if cfg.quiet() {
			// Fetched after we were told to stop: put it back (UnitOfWork#requeue).
			cfg.requeue(rep.queue, rep.raw)
			return
		}
		cfg.Process(i, Unit{Queue: rep.queue, Raw: rep.raw})
	}
}

// brpopReply reads a BRPOP reply: [key, job], nil on timeout, or an error
// reply (a queue key that is not a list, say).
func brpopReply(v any) (fetchReply, error) {
	switch v := v.(type) {
	case nil:
		return fetchReply{}, nil
	case redis.Error:
		return fetchReply{}, v
	case []any:
		if len(v) == 2 {
			key, ok1 := v[0].([]byte)
			raw, ok2 := v[1].([]byte)
			if ok1 && ok2 {
				return fetchReply{ok: true, queue: contract.QueueName(string(key)), raw: raw}, nil
			}
		}
	}
	return fetchReply{}, errors.New("sidekiq: unexpected BRPOP reply")
}

// Close does nothing: nothing outlives the slots.
func (f *brpopFetch) Close() {}
