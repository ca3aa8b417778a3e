package fetch

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
	"github.com/gomodule/redigo/redis"
)

// batchFetch takes, in one `BLMPOP 2 n queue:a … RIGHT COUNT k` (Redis
// 7.0+), as many jobs as there are idle slots, from the first non-empty
// queue in the same order BRPOP would use. A job is only popped when a slot
// is free to run it, so a crash loses exactly what BasicFetch loses (the
// jobs being run), but a busy process needs far fewer round trips.
type batchFetch struct {
	cfg  *Config
	jobs chan Unit
	idle chan struct{} // one token per idle slot
	wg   sync.WaitGroup
}

// NewBatch returns the batched fetch, or, on a Redis without BLMPOP (before
// 7.0), the BRPOP fetch with a warning. It asks Redis through an outage
// (cfg.Writes): only a refusal of the command says it is not there.
func NewBatch(cfg *Config) (Fetcher, error) {
	ok, err := probeBLMPOP(cfg.Writes)
	if err != nil {
		return nil, err
	}
	if !ok {
		cfg.Logger.Warn().Msg("this Redis has no BLMPOP (Redis < 7.0): using BRPOP fetch")
		return NewBRPOP(cfg), nil
	}
	n := cfg.Concurrency
	return &batchFetch{cfg: cfg, jobs: make(chan Unit, n), idle: make(chan struct{}, n)}, nil
}

// Start starts the workers and the fetcher.
func (b *batchFetch) Start() {
	for i := 0; i < b.cfg.Concurrency; i++ {
		b.idle <- struct{}{}
		b.wg.Add(1)
		go b.worker(i)
	}
	b.wg.Add(1)
	go b.fetch()
}

// Wait blocks until the fetcher and the workers have returned.
func (b *batchFetch) Wait() { b.wg.Wait() }

// Depth is 0: the batch fetch pipelines no BRPOPs.
func (b *batchFetch) Depth() int { return 0 }

// Requeue pushes unfinished jobs back with one RPUSH per queue.
func (b *batchFetch) Requeue(units []Unit) error { return b.cfg.bulkRequeue(units) }

// Finish writes a failed job's retry or dead entry.
func (b *batchFetch) Finish(u Unit, o *Outcome) error { return b.cfg.writeOutcome(o) }

// fetch is the single fetcher. It owns the idle-slot tokens: it pops at
// most as many jobs as slots are free and hands each to a worker.
func (b *batchFetch) fetch() {
	defer b.wg.Done()
	defer close(b.jobs)
	cfg := b.cfg
	idle := b.idle
	r := NewRand(uint64(cfg.Concurrency))
	fc := &conn{cfg: cfg}
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
		case <-cfg.Quiet:
			return
		}
		k := 1
	more:
		for k < cfg.Concurrency {
			select {
			case <-idle:
				k++
			default:
				break more
			}
		}
		if cfg.quiet() || !fc.ready() || !cfg.Order.WaitUnpaused(cfg.Quiet) {
			return
		}
		keys := cfg.Order.Args(r)
		args := make([]any, 0, len(keys)+4)
		args = append(args, Timeout, len(keys)-1)
		args = append(args, keys[:len(keys)-1]...)
		args = append(args, "RIGHT", "COUNT", k)
		sent := time.Now()
		reply, err := redis.Values(cfg.do(fc.c, "BLMPOP", args...))
		if errors.Is(err, redis.ErrNil) {
			giveBack(k)
			fc.ok(sent)
			continue
		}
		if err != nil {
			giveBack(k)
			if !fc.failed(err) {
				return
			}
			continue
		}
		fc.ok(sent)
		if len(reply) != 2 {
			giveBack(k)
			continue
		}
		key, _ := redis.String(reply[0], nil)
		elems, _ := redis.ByteSlices(reply[1], nil)
		queue := contract.QueueName(key)
		giveBack(k - len(elems))
		for i, e := range elems {
			if cfg.quiet() {
				// Push the rest back in one RPUSH, last popped first, so
				// the queue keeps its order (the first popped runs next).
				cfg.requeue(queue, reversed(elems[i:])...)
				giveBack(len(elems) - i)
				break
			}
			b.jobs <- Unit{Queue: queue, Raw: e}
		}
	}
}

// worker runs jobs handed over by the fetcher.
func (b *batchFetch) worker(slot int) {
	defer b.wg.Done()
	for u := range b.jobs {
		b.cfg.Process(slot, u)
		b.idle <- struct{}{}
	}
}

// probeBLMPOP asks Redis whether it knows BLMPOP (7.0+): a BLMPOP of 10 ms
// on a key that does not exist (COMMAND INFO may be renamed away or
// denied where BLMPOP is not).
func probeBLMPOP(writes *redisx.Retrier) (bool, error) {
	var ok bool
	err := writes.Do(func(conn redis.Conn) (err error) {
		ok, err = knows(conn, "BLMPOP", 0.01, 1, "gojob-probe-absent", "RIGHT")
		return err
	})
	if err != nil {
		return false, fmt.Errorf("sidekiq: batch fetch setup: %w", err)
	}
	return ok, nil
}

// Close does nothing: nothing outlives the slots.
func (f *batchFetch) Close() {}
