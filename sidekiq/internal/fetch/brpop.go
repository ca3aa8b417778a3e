package fetch

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gojob/gojob/sidekiq/wire"
	"github.com/gomodule/redigo/redis"
)

// DefaultPipeline is how many BRPOPs one fetch connection carries at once
// unless the server is configured otherwise.
const DefaultPipeline = 8

// replyTimeout bounds the wait for one BRPOP reply: the BRPOP timeout
// plus a margin for a stalled Redis. Replies of pipelined BRPOPs come at
// most Timeout apart (Redis only starts the next one's clock when the
// previous one returns), so the bound holds for every reply of a round.
// It is how long a connection to a vanished host takes to be noticed, and
// giving up too early has a cost: a stalled Redis may still run a BRPOP of
// the abandoned connection and pop a job nobody reads. Ruby gives up after
// the BRPOP timeout plus its 1 s network timeout; gojob waits longer.
const replyTimeout = (Timeout + 10) * time.Second

// The BRPOP fetch is Sidekiq's BasicFetch: every idle
// concurrency slot has exactly one `BRPOP queue:a queue:b … 2` in Redis,
// and a job is popped only for a slot that is free to run it, so a crash
// loses what BasicFetch loses (the jobs being run) and nothing else.
//
// Ruby gives each processor thread its own round trips. gojob instead
// carries the BRPOPs of up to Config.Pipeline idle slots on one connection as
// a pipeline: the slots hand their BRPOP to a pipe goroutine, which writes
// all it has in one write and reads the replies in order. Redis sees the
// same commands, one per job, but reads and answers several in one system
// call each, which is where its time goes when jobs are small. With an
// empty queue only the first BRPOP of a pipeline is blocked in Redis; the
// next one starts when it returns (a push wakes it at once), so an idle
// process polls less than Ruby's. When the server goes quiet, the pipelined
// BRPOPs still waiting are ended at once with CLIENT UNBLOCK (a blocked
// BRPOP that is unblocked pops nothing), so quiet and stop do not wait for
// their timeouts.

// fetchReq is one slot's BRPOP, answered on reply exactly once.
type fetchReq struct {
	args  []any
	reply chan fetchReply // buffered 1
}

// fetchReply is a fetched job (ok), or an empty reply (timeout, error,
// quiet).
type fetchReply struct {
	ok    bool
	queue string
	raw   []byte
}

// brpopFetch is the set of slots, pipe goroutines and their connections.
type brpopFetch struct {
	cfg   *Config
	reqs  chan *fetchReq // unbuffered: taken only by a pipe that answers it
	depth int
	// canUnblock is whether the pipes learn their CLIENT ID for UNBLOCK.
	canUnblock bool
	pipes      []*fetchPipe
	live       sync.WaitGroup // pipes
	wg         sync.WaitGroup // slots, pipes and the unblocker
}

// fetchPipe is one fetch connection.
type fetchPipe struct {
	fc conn
	// id is the connection's CLIENT ID (0: unknown, no UNBLOCK).
	id atomic.Int64
	// inflight is how many BRPOPs the connection has sent and not yet
	// received a reply for.
	inflight atomic.Int32
}

// NewBRPOP returns the pipelined BasicFetch. It asks Redis whether CLIENT
// ID and CLIENT UNBLOCK are allowed: without them a quiet pipe would wait
// 2 s per pipelined BRPOP on an empty queue, so it uses Ruby's layout (one
// connection per slot) instead.
func NewBRPOP(cfg *Config) Fetcher {
	n := cfg.Concurrency
	depth := max(min(cfg.Pipeline, n), 1)
	unblock := canUnblock(cfg)
	if depth > 1 && !unblock {
		cfg.Logger.Info().Str("component", "fetch").Msg("CLIENT ID/UNBLOCK not allowed on this Redis: one fetch connection per slot")
		depth = 1
	}
	return &brpopFetch{cfg: cfg, reqs: make(chan *fetchReq), depth: depth, canUnblock: unblock}
}

// Start starts the slots and their pipes.
func (p *brpopFetch) Start() {
	n := p.cfg.Concurrency
	for i := 0; i < (n+p.depth-1)/p.depth; i++ {
		fp := &fetchPipe{fc: conn{cfg: p.cfg}}
		p.pipes = append(p.pipes, fp)
		p.live.Add(1)
		p.wg.Add(1)
		go p.run(fp)
	}
	for i := 0; i < n; i++ {
		p.wg.Add(1)
		go p.slot(i)
	}
	p.wg.Add(1)
	go p.unblockAtQuiet()
}

// Wait blocks until the slots, the pipes and the unblocker have returned.
func (p *brpopFetch) Wait() { p.wg.Wait() }

// Depth returns how many BRPOPs each connection carries at most.
func (p *brpopFetch) Depth() int { return p.depth }

// Requeue pushes unfinished jobs back with one RPUSH per queue.
func (p *brpopFetch) Requeue(units []Unit) error { return p.cfg.bulkRequeue(units) }

// canUnblock asks Redis whether this client may use CLIENT ID and CLIENT
// UNBLOCK (renamed commands and ACLs may forbid them). UNBLOCK of client 0,
// which never exists, is a no-op. When Redis cannot be asked, it assumes
// yes: the pipes find out for themselves and fall back to the timeouts.
func canUnblock(cfg *Config) bool {
	return clientRefusal(cfg, []any{"ID"}, []any{"UNBLOCK", 0}) == nil
}

// clientRefusal sends CLIENT subcommands in one pipeline on a pooled
// connection and returns the first reply that refuses one (isRefused).
// Anything else, an outage included, is not a refusal.
func clientRefusal(cfg *Config, cmds ...[]any) error {
	conn, err := cfg.Pool.GetContext(cfg.Writes.Ctx)
	if err != nil {
		return nil
	}
	defer conn.Close()
	for _, c := range cmds {
		conn.Send("CLIENT", c...)
	}
	replies, err := redis.Values(conn.Do(""))
	if err != nil {
		return nil
	}
	for _, r := range replies {
		if e, ok := r.(redis.Error); ok && isRefused(e) {
			return e
		}
	}
	return nil
}

// isRefused reports whether an error reply says the command is not there
// (renamed away, too old a Redis) or not allowed (ACL), rather than that
// Redis is busy or loading.
func isRefused(e redis.Error) bool {
	msg := strings.ToLower(string(e))
	return strings.HasPrefix(msg, "noperm") || strings.Contains(msg, "unknown command") ||
		strings.Contains(msg, "unknown subcommand")
}

// slot is one concurrency slot: it BRPOPs a job through the pipes, runs
// it, and repeats until the server is quiet.
func (p *brpopFetch) slot(i int) {
	defer p.wg.Done()
	cfg := p.cfg
	r := NewRand(uint64(i))
	tid := tidFor(i)
	req := &fetchReq{reply: make(chan fetchReply, 1)}
	for {
		req.args = cfg.Order.Args(r)
		select {
		case p.reqs <- req:
		case <-cfg.Quiet:
			return
		}
		rep := <-req.reply
		if !rep.ok {
			continue // timeout, or an error the pipe is backing off from
		}
		if cfg.quiet() {
			// Fetched after we were told to stop: put it back (UnitOfWork#requeue).
			cfg.requeue(rep.queue, rep.raw)
			return
		}
		cfg.Process(tid, Unit{Queue: rep.queue, Raw: rep.raw})
	}
}

// run is one pipe: it gathers the BRPOPs of the waiting slots, sends them
// in one write, hands out the replies as they come, and repeats.
func (p *brpopFetch) run(fp *fetchPipe) {
	cfg := p.cfg
	defer p.wg.Done()
	defer p.live.Done()
	defer fp.fc.close()
	batch := make([]*fetchReq, 0, p.depth)
	for {
		select {
		case r := <-p.reqs:
			batch = append(batch, r)
		case <-cfg.Quiet:
			return
		}
		if len(batch) < p.depth {
			// Let the slots that were just answered finish their jobs
			// and come back, so that they join this write.
			runtime.Gosched()
		}
	gather:
		for len(batch) < p.depth {
			select {
			case r := <-p.reqs:
				batch = append(batch, r)
			default:
				break gather
			}
		}
		answered, ok := 0, !cfg.quiet() && p.ready(fp)
		var err error
		if ok {
			answered, err = p.round(fp, batch)
		}
		// The answered slots may already be using their requests again.
		for _, r := range batch[answered:] {
			r.reply <- fetchReply{}
		}
		clear(batch)
		batch = batch[:0]
		if err != nil {
			// A broken connection has lost the rest of the round's
			// replies: a BRPOP that Redis answered and we did not read
			// is lost, as a BasicFetch thread loses it when its
			// connection dies.
			ok = fp.fc.failed(err)
		} else if ok {
			fp.fc.ok()
		}
		if !ok {
			return
		}
	}
}

// ready makes sure the pipe has a connection and knows its CLIENT ID. It
// reports false when the server went quiet during an outage.
func (p *brpopFetch) ready(fp *fetchPipe) bool {
	for {
		if !fp.fc.ready() {
			return false
		}
		if !fp.fc.fresh || !p.canUnblock {
			return true
		}
		id, err := redis.Int64(fp.fc.c.Do("CLIENT", "ID"))
		if err == nil {
			fp.id.Store(id)
			return true
		}
		var re redis.Error
		if errors.As(err, &re) && isRefused(re) {
			// CLIENT ID unknown (Redis < 5) or not allowed: no UNBLOCK
			// at quiet, the pipelined BRPOPs end by their timeouts.
			fp.id.Store(0)
			p.cfg.Logger.Debug().Err(err).Str("component", "fetch").Msg("CLIENT ID refused; quiet waits for the BRPOP timeouts")
			return true
		}
		if !fp.fc.failed(err) {
			return false
		}
	}
}

// round sends the BRPOPs of batch in one write and answers each request as
// its reply arrives. It returns how many it answered, in order (the caller
// answers the rest), and the connection's or an error reply's error.
func (p *brpopFetch) round(fp *fetchPipe, batch []*fetchReq) (int, error) {
	conn := fp.fc.c
	var err error
	for _, r := range batch {
		if err = conn.Send("BRPOP", r.args...); err != nil {
			break
		}
	}
	if err == nil {
		fp.inflight.Store(int32(len(batch)))
		err = conn.Flush()
	}
	var replyErr error
	answered := 0
	for err == nil && answered < len(batch) {
		var v any
		v, err = redis.ReceiveWithTimeout(conn, replyTimeout)
		if err != nil {
			break
		}
		fp.inflight.Add(-1)
		rep, rerr := brpopReply(v)
		if rerr != nil && replyErr == nil {
			replyErr = rerr
		}
		batch[answered].reply <- rep
		answered++
	}
	fp.inflight.Store(0)
	if err == nil {
		err = replyErr
	}
	return answered, err
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
				return fetchReply{ok: true, queue: wire.QueueName(string(key)), raw: raw}, nil
			}
		}
	}
	return fetchReply{}, errors.New("sidekiq: unexpected BRPOP reply")
}

// unblockInterval is how often, once quiet, the pipes' blocked BRPOPs are
// ended with CLIENT UNBLOCK.
const unblockInterval = 10 * time.Millisecond

// unblockAtQuiet waits for quiet and then ends the BRPOPs still blocked in
// Redis with CLIENT UNBLOCK (each returns nil, as on its timeout), until
// every pipe has stopped.
func (p *brpopFetch) unblockAtQuiet() {
	defer p.wg.Done()
	stopped := make(chan struct{})
	go func() { p.live.Wait(); close(stopped) }()
	select {
	case <-p.cfg.Quiet:
	case <-stopped:
		return
	}
	t := time.NewTicker(unblockInterval)
	defer t.Stop()
	for {
		var ids []any
		for _, fp := range p.pipes {
			if id := fp.id.Load(); id != 0 && fp.inflight.Load() > 0 {
				ids = append(ids, id)
			}
		}
		if len(ids) > 0 && !p.unblock(ids) {
			<-stopped // not allowed: the BRPOPs end by their timeouts
			return
		}
		select {
		case <-t.C:
		case <-stopped:
			return
		}
	}
}

// unblock sends one CLIENT UNBLOCK per id in a pipeline. It reports false
// when Redis refuses the command (the pipes then wait for their timeouts).
func (p *brpopFetch) unblock(ids []any) bool {
	cmds := make([][]any, len(ids))
	for i, id := range ids {
		cmds[i] = []any{"UNBLOCK", id}
	}
	if err := clientRefusal(p.cfg, cmds...); err != nil {
		p.cfg.Logger.Debug().Err(err).Str("component", "fetch").Msg("CLIENT UNBLOCK refused; quiet waits for the BRPOP timeouts")
		return false
	}
	return true
}
