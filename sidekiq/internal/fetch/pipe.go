package fetch

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/sidekiq/internal/resp"
)

// DefaultPipeline is how many slots' fetches one connection carries at
// once unless the server is configured otherwise.
const DefaultPipeline = 8

// The slots of a server hand their fetch commands to pipe goroutines, each
// with one connection, which write the commands of all waiting slots in one
// write and read the replies in order. Redis sees the same commands, one
// fetch per idle slot, but reads and answers several in one system call
// each, which is where its time goes when jobs are small. With an empty
// queue only the first blocking command of a pipeline is blocked in Redis;
// the next one starts when it returns (a push wakes it at once). When the
// server goes quiet, the blocking commands still waiting are ended at once
// with CLIENT UNBLOCK (an unblocked BRPOP or BLMOVE moves nothing), so quiet
// and stop do not wait for their timeouts.

// pipeCmd is one command of a request.
type pipeCmd struct {
	name string
	args []any
}

// fetchReq is one slot's commands, sent together and answered on reply
// exactly once. The reply of the last command is the fetch's, read by
// decode; the replies of the commands before it (acknowledgements) are only
// checked for errors.
type fetchReq struct {
	cmds   []pipeCmd
	decode func(v any) (fetchReply, error)
	reply  chan fetchReply // buffered 1
}

// fetchReply is a fetched job (ok), or an empty reply (timeout, error,
// quiet). done says whether every command of the request ran and was
// answered (so an acknowledgement sent with it is done).
type fetchReply struct {
	ok    bool
	done  bool
	queue string
	raw   []byte
	err   error // an error reply of one of the commands
}

// pipes is a set of pipe goroutines and their connections.
type pipes struct {
	cfg   *Config
	reqs  chan *fetchReq // unbuffered: taken only by a pipe that answers it
	depth int
	// canUnblock is whether the pipes learn their CLIENT ID for UNBLOCK.
	canUnblock bool
	list       []*fetchPipe
	live       sync.WaitGroup // pipes
	// dropped counts connections closed with requests in flight: their
	// commands may still run in Redis.
	dropped atomic.Int64
	// lastReply is when any pipe last read a reply (unix nanoseconds).
	lastReply atomic.Int64
}

// fetchPipe is one fetch connection.
type fetchPipe struct {
	fc conn
	// id is the connection's CLIENT ID (0: unknown, no UNBLOCK).
	id atomic.Int64
	// inflight is how many commands the connection has sent and not yet
	// received a reply for.
	inflight atomic.Int32
	// waitingSince is when the pipe started waiting for its next reply
	// (unix nanoseconds, 0 when it is not waiting).
	waitingSince atomic.Int64
}

// newPipes sizes the pipes for n slots: depth is capped by n, and is 1
// (Ruby's layout: a connection per slot) where Redis refuses CLIENT
// UNBLOCK, since a quiet pipe would otherwise wait out each pipelined
// blocking command's timeout.
func newPipes(cfg *Config, n int) *pipes {
	depth := max(min(cfg.Pipeline, n), 1)
	unblock := canUnblock(cfg)
	if depth > 1 && !unblock {
		cfg.Logger.Debug().Str("component", "fetch").Msg("CLIENT ID/UNBLOCK not allowed on this Redis: one fetch connection per slot")
		depth = 1
	}
	p := &pipes{cfg: cfg, reqs: make(chan *fetchReq), depth: depth, canUnblock: unblock}
	for i := 0; i < (n+depth-1)/depth; i++ {
		p.list = append(p.list, &fetchPipe{fc: conn{cfg: cfg}})
	}
	return p
}

// start starts the pipes and the goroutine that unblocks them at quiet and
// watches for stalls; wg counts them.
func (p *pipes) start(wg *sync.WaitGroup) {
	for _, fp := range p.list {
		p.live.Add(1)
		wg.Add(1)
		go p.run(fp, wg)
	}
	wg.Add(1)
	go p.watch(wg)
}

// do hands req to a pipe and waits for its reply; ok is false when the
// server went quiet before a pipe took it.
func (p *pipes) do(req *fetchReq) (rep fetchReply, ok bool) {
	select {
	case p.reqs <- req:
	case <-p.cfg.Quiet:
		return fetchReply{}, false
	}
	return <-req.reply, true
}

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

// knows sends a probe command: true when Redis ran it, false when it
// refused it (isRefused: a command it does not have, or one not allowed).
// Any other error is returned.
func knows(conn redis.Conn, cmd string, args ...any) (bool, error) {
	_, err := conn.Do(cmd, args...)
	var re redis.Error
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &re) && isRefused(re):
		return false, nil
	}
	return false, err
}

// run is one pipe: it gathers the requests of the waiting slots, sends them
// in one write, hands out the replies as they come, and repeats.
func (p *pipes) run(fp *fetchPipe, wg *sync.WaitGroup) {
	cfg := p.cfg
	defer wg.Done()
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
		sent := time.Now()
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
			if fp.inflight.Load() > 0 {
				// Commands sent and not answered may still run: a
				// reliable fetch finds their jobs in its own list.
				p.dropped.Add(1)
			}
			fp.inflight.Store(0)
			ok = fp.fc.failed(err)
		} else if ok {
			fp.fc.ok(sent)
		}
		if !ok {
			return
		}
	}
}

// ready makes sure the pipe has a connection and knows its CLIENT ID. It
// reports false when the server went quiet during an outage.
func (p *pipes) ready(fp *fetchPipe) bool {
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
			// at quiet, the pipelined commands end by their timeouts.
			fp.id.Store(0)
			p.cfg.Logger.Debug().Err(err).Str("component", "fetch").Msg("CLIENT ID refused; quiet waits for the fetch timeouts")
			return true
		}
		if !fp.fc.failed(err) {
			return false
		}
	}
}

// round sends the commands of batch in one write and answers each request
// as its replies arrive. It returns how many requests it answered, in order
// (the caller answers the rest), and the connection's error.
func (p *pipes) round(fp *fetchPipe, batch []*fetchReq) (int, error) {
	conn := fp.fc.c
	var err error
	sent := 0
	corked := resp.Cork(conn)
	for _, r := range batch {
		if err != nil {
			break
		}
		for _, c := range r.cmds {
			if err = conn.Send(c.name, c.args...); err != nil {
				break
			}
			sent++
		}
		if err != nil {
			break
		}
	}
	if err == nil {
		fp.inflight.Store(int32(sent))
		err = conn.Flush()
	}
	if corked != nil {
		if uerr := corked.Uncork(); err == nil {
			err = uerr
		}
	}
	var replyErr error
	answered := 0
	for err == nil && answered < len(batch) {
		r := batch[answered]
		rep := fetchReply{done: true}
		for i := range r.cmds {
			var v any
			v, err = p.receive(fp)
			if err != nil {
				break
			}
			if i < len(r.cmds)-1 {
				if e, ok := v.(redis.Error); ok && rep.err == nil {
					rep.err = e
				}
				continue
			}
			got, derr := r.decode(v)
			got.done = true
			if rep.err != nil {
				got.err = rep.err
			} else if derr != nil {
				got.err = derr
			}
			rep = got
		}
		if err != nil {
			break
		}
		if rep.err != nil && replyErr == nil {
			replyErr = rep.err
		}
		r.reply <- rep
		answered++
	}
	if err == nil {
		// An error reply (a queue key that is not a list, say) backs the
		// pipe off as an outage does, instead of spinning.
		err = replyErr
	}
	return answered, err
}

// receive reads one reply, timing the wait for the stall watch: a pipe
// waits from the write, or from its last reply, until the reply comes (one
// clock read per reply).
func (p *pipes) receive(fp *fetchPipe) (any, error) {
	if fp.waitingSince.Load() == 0 {
		fp.waitingSince.Store(time.Now().UnixNano())
	}
	sent := fp.waitingSince.Load() // at the latest
	v, err := fp.fc.c.Receive()
	if err != nil {
		fp.waitingSince.Store(0)
		return v, err
	}
	now := time.Now().UnixNano()
	if fp.inflight.Add(-1) > 0 {
		fp.waitingSince.Store(now) // waiting for the next one
	} else {
		fp.waitingSince.Store(0)
	}
	p.lastReply.Store(now)
	p.cfg.Outage.OKSince(time.Unix(0, sent)) // ends a stall, if one was logged
	p.cfg.Health.ok()
	return v, err
}

// watchInterval is how often the watch goroutine looks at the pipes.
const watchInterval = 10 * time.Millisecond

// watch logs a stall once (a pipe waiting longer than stallAfter for a
// reply) and, from quiet on, ends the blocking commands still waiting in
// Redis with CLIENT UNBLOCK (each returns nil, as on its timeout), until
// every pipe has stopped.
func (p *pipes) watch(wg *sync.WaitGroup) {
	defer wg.Done()
	stopped := make(chan struct{})
	go func() { p.live.Wait(); close(stopped) }()
	t := time.NewTicker(watchInterval)
	defer t.Stop()
	unblocking := p.canUnblock
	for {
		select {
		case <-t.C:
		case <-stopped:
			return
		}
		// Stalled: a pipe has waited longer than stallAfter, and no pipe
		// has had a reply meanwhile.
		now := time.Now().UnixNano()
		if time.Duration(now-p.lastReply.Load()) > stallAfter {
			for _, fp := range p.list {
				if since := fp.waitingSince.Load(); since != 0 && time.Duration(now-since) > stallAfter {
					p.cfg.Outage.Stalled(stallAfter)
					break
				}
			}
		}
		if !unblocking || !p.cfg.quiet() {
			continue
		}
		var ids []any
		for _, fp := range p.list {
			if id := fp.id.Load(); id != 0 && fp.inflight.Load() > 0 {
				ids = append(ids, id)
			}
		}
		if len(ids) > 0 && !p.unblock(ids) {
			unblocking = false // not allowed: the commands end by their timeouts
		}
	}
}

// unblock sends one CLIENT UNBLOCK per id in a pipeline. It reports false
// when Redis refuses the command.
func (p *pipes) unblock(ids []any) bool {
	cmds := make([][]any, len(ids))
	for i, id := range ids {
		cmds[i] = []any{"UNBLOCK", id}
	}
	if err := clientRefusal(p.cfg, cmds...); err != nil {
		p.cfg.Logger.Debug().Err(err).Str("component", "fetch").Msg("CLIENT UNBLOCK refused; quiet waits for the fetch timeouts")
		return false
	}
	return true
}
