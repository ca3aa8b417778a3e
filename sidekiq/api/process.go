package api

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// The signal names a process reacts to (docs/sidekiq-wire.md#signals).
const (
	sigQuiet = "TSTP" // stop fetching (Ruby's Process#quiet!)
	sigStop  = "TERM" // shut down (Process#stop!)
	sigDump  = "TTIN" // log a thread dump (Process#dump_threads)
)

// Process is one live Sidekiq process (Ruby's Sidekiq::Process): its info
// JSON merged with the heartbeat fields.
type Process struct {
	// Identity is the process's key in the processes set.
	Identity string
	// Attributes is the info JSON with "busy", "beat", "quiet", "rss",
	// "rtt_us" merged in as Ruby's ProcessSet#each does, and "concurrency"
	// from the hash field when the process writes one (8.1.2+ layout).
	Attributes *rubyjson.Map
	// Hostname, PID, Tag, Labels, Queues and StartedAt come from info.
	Hostname  string
	PID       int64
	Tag       string
	Labels    []string
	Queues    []string
	StartedAt time.Time
	// Concurrency is the hash field when present, else info's.
	Concurrency int64
	// Busy is the number of jobs running at the last beat.
	Busy int64
	// Beat is the time of the last heartbeat.
	Beat time.Time
	// RSS is the resident memory in KB.
	RSS int64
	// RTTMicros is the Redis round trip measured at the last beat, in µs.
	RTTMicros int64
	// Embedded is info's "embedded" (7.0.3+); embedded processes cannot be
	// quieted or stopped through the API.
	Embedded bool
	// Stopping is whether the process is quiet: its "quiet" field is
	// "true" (Ruby's stopping?).
	Stopping bool

	api *API
}

// Quiet sends TSTP: the process stops fetching new jobs.
func (p *Process) Quiet(ctx context.Context) error {
	return p.signalUnlessEmbedded(ctx, sigQuiet)
}

// Stop sends TERM: the process shuts down.
func (p *Process) Stop(ctx context.Context) error {
	return p.signalUnlessEmbedded(ctx, sigStop)
}

// DumpThreads sends TTIN: the process logs its thread backtraces.
func (p *Process) DumpThreads(ctx context.Context) error {
	return p.api.signalProcess(ctx, p.Identity, sigDump)
}

func (p *Process) signalUnlessEmbedded(ctx context.Context, sig string) error {
	if p.Embedded {
		return fmt.Errorf("sidekiq: process %s is embedded and cannot be sent %s", p.Identity, sig)
	}
	return p.api.signalProcess(ctx, p.Identity, sig)
}

// signalProcess sends a signal name to a process as the Web UI does: MULTI
// LPUSH <identity>-signals <sig>; EXPIRE <identity>-signals 60; EXEC. The
// process pops it at its next heartbeat.
func (a *API) signalProcess(ctx context.Context, identity, sig string) error {
	conn, err := a.conn(ctx, "signal process")
	if err != nil {
		return err
	}
	defer conn.Close()
	key := contract.SignalsKey(identity)
	_, err = redisx.ExecMulti(ctx, conn, func(c redis.Conn) {
		c.Send("LPUSH", key, sig)
		c.Send("EXPIRE", key, 60)
	})
	if err != nil {
		return fmt.Errorf("sidekiq: signal %s to %s: %w", sig, identity, err)
	}
	return nil
}

// Processes lists the live processes, sorted by identity, as Ruby's
// ProcessSet does: cleanup, SSCAN processes (sorted), then one pipeline of
// HMGET <id> info busy beat quiet rss rtt_us concurrency; ids without an
// info field are skipped. Ruby's total_concurrency and total_rss are the
// sums of Concurrency and RSS.
//
// The cleanup is Sidekiq 6.5.2+'s: only when SET process_cleanup 1 NX EX
// 60 succeeds (once a minute across callers), SSCAN processes, pipelined
// HGET <id> info, and one SREM of the ids whose hash has no info (it
// expired 60 s after the last beat). The listing skips those ids either
// way; the cleanup keeps the processes set (Stats.Processes) exact.
func (a *API) Processes(ctx context.Context) ([]*Process, error) {
	if _, err := a.cleanupProcesses(ctx); err != nil {
		return nil, err
	}
	conn, ids, err := a.connMembers(ctx, "list processes", contract.KeyProcesses)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	for _, id := range ids {
		conn.Send("HMGET", id, "info", "busy", "beat", "quiet", "rss", "rtt_us", "concurrency")
	}
	if err := conn.Flush(); err != nil {
		return nil, fmt.Errorf("sidekiq: list processes: %w", err)
	}
	var out []*Process
	for _, id := range ids {
		f, err := redis.Values(redis.ReceiveContext(conn, ctx))
		if err != nil {
			return nil, fmt.Errorf("sidekiq: list processes: %w", err)
		}
		if f[0] == nil {
			continue
		}
		proc, err := a.newProcess(f)
		if err != nil {
			return nil, fmt.Errorf("sidekiq: process %s: %w", id, err)
		}
		out = append(out, proc)
	}
	return out, nil
}

// newProcess builds a Process from HMGET info busy beat quiet rss rtt_us
// concurrency.
func (a *API) newProcess(f []any) (*Process, error) {
	info, err := rubyjson.ParseObject(f[0].([]byte))
	if err != nil {
		return nil, fmt.Errorf("info: %w", err)
	}
	m := info.Clone()
	p := &Process{api: a, Attributes: m}
	p.Busy = contract.RubyToI(redisx.OptString(f[1]))
	beat := contract.RubyToF(redisx.OptString(f[2]))
	p.Beat = contract.FromEpochSeconds(beat)
	p.RSS = contract.RubyToI(redisx.OptString(f[4]))
	p.RTTMicros = contract.RubyToI(redisx.OptString(f[5]))
	m.Set("busy", rubyjson.IntValue(p.Busy))
	m.Set("beat", rubyjson.FloatValue(beat))
	if f[3] == nil {
		m.Set("quiet", rubyjson.Value{})
	} else {
		quiet := redisx.OptString(f[3])
		p.Stopping = quiet == "true"
		m.Set("quiet", rubyjson.StringValue(quiet))
	}
	m.Set("rss", rubyjson.IntValue(p.RSS))
	m.Set("rtt_us", rubyjson.IntValue(p.RTTMicros))
	if f[6] != nil {
		m.Set("concurrency", rubyjson.IntValue(contract.RubyToI(redisx.OptString(f[6]))))
	}
	str := func(k string) string {
		v, _ := m.Get(k)
		s, _ := v.Str()
		return s
	}
	strs := func(k string) []string {
		v, _ := m.Get(k)
		return contract.StringElems(v)
	}
	num := func(k string) int64 {
		v, _ := m.Get(k)
		if n, ok := v.Int(); ok {
			return n
		}
		fl, _ := v.Float()
		return int64(fl)
	}
	p.Identity = str("identity")
	p.Hostname = str("hostname")
	p.Tag = str("tag")
	p.PID = num("pid")
	p.Concurrency = num("concurrency")
	p.Labels = strs("labels")
	p.Queues = strs("queues")
	if v, ok := m.Get("started_at"); ok {
		if fl, ok := v.Float(); ok {
			p.StartedAt = contract.FromEpochSeconds(fl)
		}
	}
	if v, ok := m.Get("embedded"); ok {
		p.Embedded = v.Truthy()
	}
	return p, nil
}

// cleanupProcesses is the cleanup Processes runs first (see there).
func (a *API) cleanupProcesses(ctx context.Context) (*contract.CleanupResult, error) {
	conn, err := a.conn(ctx, "cleanup processes")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return contract.CleanupProcesses(ctx, conn, contract.CleanupParams{Lock: true})
}

// Leader returns the Sidekiq Enterprise leader's identity (GET
// dear-leader), "" when there is none.
func (a *API) Leader(ctx context.Context) (string, error) {
	conn, err := a.conn(ctx, "leader")
	if err != nil {
		return "", err
	}
	defer conn.Close()
	s, err := redis.String(redis.DoContext(conn, ctx, "GET", "dear-leader"))
	if err == redis.ErrNil {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("sidekiq: leader: %w", err)
	}
	return s, nil
}

// Work is one job running in a process (an entry of Ruby's WorkSet).
type Work struct {
	// Identity is the process.
	Identity string
	// TID is the thread id (the work hash field).
	TID string
	// Queue is the queue the job was fetched from.
	Queue string
	// Payload is the job; nil when PayloadRaw is not a JSON object.
	Payload *wire.Job
	// PayloadRaw is the job's JSON (the string stored in the work entry, or
	// the encoding of an object payload).
	PayloadRaw []byte
	// RunAt is when the job started (integer epoch seconds on the wire).
	RunAt time.Time
	// HeartbeatAt is the job's last heartbeat (gojob's "heartbeat_at",
	// docs/heartbeats.md); zero when it sent none or runs in Ruby.
	HeartbeatAt time.Time
	// ParseErr is set when the work entry itself is not valid JSON; then
	// PayloadRaw holds the entry as stored.
	ParseErr error
	// List is the in-progress list holding the job (Running), "" when its
	// process keeps none.
	List string
	// StartedAfter is, for a job that Running found in an in-progress list
	// but in no work hash yet (RunAt zero), its process's last heartbeat:
	// the job started after it.
	StartedAfter time.Time
}

// The two work-hash layouts: <id>:workers (≤6.4.1) and <id>:work
// (6.4.2+).
var (
	workersLayout = wire.Version{Major: 6, Minor: 4, Patch: 1}
	workLayout    = wire.Version{Major: 6, Minor: 4, Patch: 2}
)

// WorkSet lists the running jobs of every live process as their work
// hashes show them at the last heartbeat, sorted by RunAt (then identity
// and tid), in one pipeline: EXISTS <id>, HGETALL <id>:workers (≤6.4.1)
// and HGETALL <id>:work (6.4.2+) for each process; processes whose hash
// is gone are skipped, as in Ruby. Reading both keys shows the busy jobs
// of a mixed cluster; a thread found under both (a process writing for
// all readers, contract.FormatForAll) is listed once, from <id>:work.
// Ruby's WorkSet#size, the busy counts of the last heartbeats, is
// Stats.Busy. Running is what runs now, to the millisecond.
func (a *API) WorkSet(ctx context.Context) ([]*Work, error) {
	conn, ids, err := a.connMembers(ctx, "work set", contract.KeyProcesses)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	for _, id := range ids {
		conn.Send("EXISTS", id)
		conn.Send("HGETALL", contract.WorkKey(id, workersLayout))
		conn.Send("HGETALL", contract.WorkKey(id, workLayout))
	}
	if err := conn.Flush(); err != nil {
		return nil, fmt.Errorf("sidekiq: work set: %w", err)
	}
	var out []*Work
	for _, id := range ids {
		exists, err := redis.Int(redis.ReceiveContext(conn, ctx))
		if err != nil {
			return nil, fmt.Errorf("sidekiq: work set: %w", err)
		}
		var mine []*Work
		for range 2 {
			fields, err := redis.StringMap(redis.ReceiveContext(conn, ctx))
			if err != nil {
				return nil, fmt.Errorf("sidekiq: work set: %w", err)
			}
			if exists != 0 {
				mine = appendWork(mine, id, fields)
			}
		}
		out = append(out, mine...)
	}
	sortWork(out)
	return out, nil
}

// appendWork adds the entries of one work hash of process id to ws (the
// process's entries so far): a thread already there is replaced, so that
// of the two layouts read in order, <id>:work wins. A malformed entry is
// listed as such instead of hiding every other process's work (Ruby
// raises here).
func appendWork(ws []*Work, id string, fields map[string]string) []*Work {
	tids := make([]string, 0, len(fields))
	for tid := range fields {
		tids = append(tids, tid)
	}
	slices.Sort(tids)
	for _, tid := range tids {
		w, err := parseWork(id, tid, fields[tid])
		if err != nil {
			w = &Work{Identity: id, TID: tid, PayloadRaw: []byte(fields[tid]), ParseErr: err}
		}
		if i := slices.IndexFunc(ws, func(o *Work) bool { return o.TID == tid }); i >= 0 {
			ws[i] = w
			continue
		}
		ws = append(ws, w)
	}
	return ws
}

// parseWork reads a work hash value: {"queue":…,"payload":<JSON string or
// object>,"run_at":<epoch seconds>}.
func parseWork(id, tid, js string) (*Work, error) {
	m, err := rubyjson.ParseObject([]byte(js))
	if err != nil {
		return nil, err
	}
	w := &Work{Identity: id, TID: tid}
	if v, ok := m.Get("queue"); ok {
		w.Queue, _ = v.Str()
	}
	if v, ok := m.Get("payload"); ok {
		if s, isStr := v.Str(); isStr {
			w.PayloadRaw = []byte(s)
			w.Payload, _ = wire.ParseJob(w.PayloadRaw)
		} else if obj, isObj := v.Map(); isObj {
			w.PayloadRaw = obj.Encode()
			w.Payload, _ = wire.ParseJob(w.PayloadRaw)
		}
	}
	if v, ok := m.Get("heartbeat_at"); ok {
		if f, ok := v.Float(); ok {
			w.HeartbeatAt = contract.FromEpochSeconds(f)
		}
	}
	if v, ok := m.Get("run_at"); ok {
		switch v.Kind() {
		case rubyjson.Integer:
			n, _ := v.Int()
			w.RunAt = time.Unix(n, 0)
		case rubyjson.Float:
			f, _ := v.Float()
			w.RunAt = contract.FromEpochSeconds(f)
		case rubyjson.String:
			s, _ := v.Str()
			if f, err := strconv.ParseFloat(s, 64); err == nil {
				w.RunAt = contract.FromEpochSeconds(f)
			}
		}
	}
	return w, nil
}
