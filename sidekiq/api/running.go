package api

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Running lists the jobs the live processes run now, each once, as the
// Busy page, `gojob processes`, `gojob top` and Locate show them. It
// joins two records that each tell part of the story:
//
//   - the work hashes (WorkSet, deduplicated): what each process ran at
//     its last heartbeat, written every 5 to 10 s, with the start time and
//     thread;
//   - the reliable fetch's in-progress lists (contract.WorkingListKey,
//     registered in contract.KeyWorkingLists; docs/reliable-fetch.md):
//     a job is in its process's list from the moment it is taken until
//     its outcome is written.
//
// For a process that keeps in-progress lists the lists are the truth: a
// work entry whose job has left them has ended since the last heartbeat
// and is not listed, and a job in them that no work entry shows yet has
// started since the last heartbeat: it is listed with RunAt zero and
// StartedAfter that heartbeat's time (a job fetched ahead, about to start,
// looks the same). A process without lists (Ruby Sidekiq, gojob's basic
// fetch) is shown as its work hash says.
func (a *API) Running(ctx context.Context) ([]*Work, error) {
	v, err := a.readRunning(ctx)
	if err != nil {
		return nil, err
	}
	return v.work, nil
}

// runningView is what readRunning found: the running jobs, and the jobs
// in in-progress lists whose process is gone (orphans, which a live
// process's recovery pushes back to their queues).
type runningView struct {
	work    []*Work
	orphans []*Work
}

// readRunning reads the processes, their work hashes and the registered
// in-progress lists in one pipeline (see Running).
func (a *API) readRunning(ctx context.Context) (*runningView, error) {
	conn, ids, err := a.connMembers(ctx, "running jobs", contract.KeyProcesses)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	lists, err := redisx.SScanAll(ctx, conn, contract.KeyWorkingLists)
	if err != nil {
		return nil, fmt.Errorf("sidekiq: running jobs: %w", err)
	}
	slices.Sort(ids)
	slices.Sort(lists)
	for _, id := range ids {
		conn.Send("HMGET", id, "info", "beat")
		conn.Send("HGETALL", contract.WorkKey(id, workersLayout))
		conn.Send("HGETALL", contract.WorkKey(id, workLayout))
	}
	type listInfo struct {
		key, queue, ident string
	}
	var infos []listInfo
	for _, l := range lists {
		q, ident, ok := contract.ParseWorkingListKey(l)
		if !ok {
			continue
		}
		infos = append(infos, listInfo{key: l, queue: q, ident: ident})
		conn.Send("LRANGE", l, 0, -1)
		conn.Send("EXISTS", contract.ReliableHeartbeatKey(ident))
	}
	if err := conn.Flush(); err != nil {
		return nil, fmt.Errorf("sidekiq: running jobs: %w", err)
	}
	recv := func() (any, error) {
		r, err := redis.ReceiveContext(conn, ctx)
		if err != nil {
			return nil, fmt.Errorf("sidekiq: running jobs: %w", err)
		}
		return r, nil
	}
	live := map[string]*runningProc{}
	for _, id := range ids {
		r, err := recv()
		if err != nil {
			return nil, err
		}
		f, _ := redis.Values(r, nil)
		var p *runningProc
		if len(f) == 2 && f[0] != nil {
			p = &runningProc{listed: map[string]*Work{}}
			p.beat = contract.FromEpochSeconds(contract.RubyToF(redisx.OptString(f[1])))
			live[id] = p
		}
		for range 2 {
			r, err := recv()
			if err != nil {
				return nil, err
			}
			fields, err := redis.StringMap(r, nil)
			if err != nil {
				return nil, fmt.Errorf("sidekiq: running jobs: %w", err)
			}
			if p != nil {
				p.work = appendWork(p.work, id, fields)
			}
		}
	}
	view := &runningView{}
	for _, l := range infos {
		r, err := recv()
		if err != nil {
			return nil, err
		}
		vals, err := redis.ByteSlices(r, nil)
		if err != nil && err != redis.ErrNil {
			return nil, fmt.Errorf("sidekiq: running jobs: %w", err)
		}
		r, err = recv()
		if err != nil {
			return nil, err
		}
		hb, _ := redis.Int(r, nil)
		owner := listOwner(l.ident, ids, live)
		p := live[owner]
		if p != nil {
			p.lists = true
		}
		for _, raw := range vals {
			w := &Work{Identity: owner, Queue: l.queue, List: l.key, PayloadRaw: raw}
			w.Payload, w.ParseErr = wire.ParseJob(raw)
			switch {
			case p != nil && w.Payload != nil:
				if _, dup := p.listed[w.Payload.JID()]; !dup {
					p.listed[w.Payload.JID()] = w
				}
			case p == nil && hb == 0:
				w.Identity = l.ident
				view.orphans = append(view.orphans, w)
			}
		}
	}
	for _, id := range ids {
		p := live[id]
		if p == nil {
			continue
		}
		seen := map[string]bool{}
		for _, w := range p.work {
			if w.Payload == nil {
				view.work = append(view.work, w)
				continue
			}
			jid := w.Payload.JID()
			if seen[jid] {
				continue
			}
			if p.lists {
				in := p.listed[jid]
				if in == nil {
					continue // ended since the last heartbeat
				}
				w.List = in.List
			}
			seen[jid] = true
			view.work = append(view.work, w)
		}
		for jid, w := range p.listed {
			if seen[jid] {
				continue
			}
			seen[jid] = true
			w.StartedAfter = p.beat
			view.work = append(view.work, w)
		}
	}
	sortWork(view.work)
	sortWork(view.orphans)
	return view, nil
}

// runningProc is a live process as readRunning sees it.
type runningProc struct {
	beat time.Time
	work []*Work
	// lists: it keeps in-progress lists; listed are their jobs by jid.
	lists  bool
	listed map[string]*Work
}

// listOwner returns the live process whose in-progress list identity is
// ident: gojob names a process's lists after its identity followed by a
// sequence (fetch's listIdent), the gem after the identity itself. ""
// when no live process owns it.
func listOwner(ident string, ids []string, live map[string]*runningProc) string {
	for _, id := range ids {
		if live[id] == nil {
			continue
		}
		if ident == id || (strings.HasPrefix(ident, id) && isHex(ident[len(id):])) {
			return id
		}
	}
	return ""
}

func isHex(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// startedAt is when w started as far as Redis tells: RunAt, or the
// heartbeat it started after.
func (w *Work) startedAt() time.Time {
	if !w.RunAt.IsZero() {
		return w.RunAt
	}
	return w.StartedAfter
}

func sortWork(ws []*Work) {
	slices.SortStableFunc(ws, func(x, y *Work) int {
		return cmp.Or(x.startedAt().Compare(y.startedAt()), cmp.Compare(x.Identity, y.Identity), cmp.Compare(x.TID, y.TID),
			cmp.Compare(x.List, y.List))
	})
}
