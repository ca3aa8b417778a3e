package fetch

import (
	"slices"
	"sync"

	"github.com/gojob/gojob/sidekiq/internal/resp"
)

// A fetched job, and the reliable slots' mirrors of their lists (lists.go)
// that hold it until it is acknowledged.

// Unit is one fetched job: the queue it came from and its exact bytes
// (Ruby's UnitOfWork).
type Unit struct {
	Queue string
	Raw   []byte
	// Prepared is what the prepare of a FetchAhead made of a job fetched
	// ahead (nil otherwise).
	Prepared any

	// reliableUnit is the reliable fetch's part of the unit.
	reliableUnit
}

// reliableUnit is the reliable fetch's part of a unit.
type reliableUnit struct {
	// list is the in-progress list holding the job (reliable fetch), and
	// held its entry in the mirror of the slot that moved it there.
	list string
	held *held
	// slot is the reliable slot that moved it.
	slot *slotState
	// deferred marks a success whose acknowledgement its server holds back
	// (Defer).
	deferred bool
	// ahead is the slot's fetch ahead while the job runs (FetchAhead); nil
	// when it may not fetch ahead.
	ahead aheadRequester
}

// aheadRequester is a slot's fetch ahead as its running job sees it
// (ahead.go).
type aheadRequester interface {
	// fetchAhead is FetchAhead for the slot: false unless armed, once.
	fetchAhead(prepare func(next *Unit)) bool
}

// FetchAhead lets the slot running u fetch its next jobs now, while u
// waits (see ahead.go), until it holds as many as aheadDepthAfter allows.
// prepare, when not nil, is called with each job fetched, on the goroutine
// that fetched it, before the slot may take it; what it sets in the unit's
// Prepared travels with it. It reports whether the slot fetches ahead: false for a
// fetch that does not fetch ahead, a slot whose last job was long, a
// server going quiet, or a second call.
func (u *Unit) FetchAhead(prepare func(next *Unit)) bool {
	if u.ahead == nil {
		return false
	}
	return u.ahead.fetchAhead(prepare)
}

// held is one job in a slot's mirror.
type held struct {
	raw []byte
	sl  *slotList
	// trimmed: its acknowledgement by position is on its way. It stays in
	// the mirror until that has run (it is no orphan for the sweep of the
	// own lists), but no longer counts as older than the jobs behind it:
	// positions commute, each LTRIM takes out the oldest entry whatever
	// the order they run in.
	trimmed bool
}

// slotList is one of a slot's lists: its key, the arguments of the
// commands on it (made once: a command's arguments would otherwise cost
// allocations per job), and its mirror.
type slotList struct {
	key   string
	ident *listIdent
	move  []any // LMOVE <queue> <key> RIGHT LEFT
	rpl   []any // RPOPLPUSH <queue> <key>
	// moveCmd, rplCmd and trimCmd are move and rpl encoded, and LTRIM
	// <key> 0 -2 (package resp).
	moveCmd, rplCmd, trimCmd []byte
	// registered: the list is in its identity's lists (under idents.mu),
	// which a move then need not register; a flag, so that planning a
	// move looks no key up.
	registered bool
	// held is the mirror: the jobs the slot moved into the list and still
	// holds, oldest first.
	held []*held
}

// slotState is a reliable slot: its handoff channel, its identity, and
// the mirror of its lists, for positions and for the sweep of the own
// lists (a job a slot holds is not an orphan).
type slotState struct {
	i    int
	jobs chan Unit // the taker's handoff (capacity 1)

	mu    sync.Mutex
	ident *listIdent
	// lists are the slot's lists by key, and cur those of ident by queue
	// (by queueState.i: planning a move looks no key up).
	lists map[string]*slotList
	cur   []*slotList
}

func newSlotState(i int) *slotState {
	return &slotState{i: i, jobs: make(chan Unit, 1), lists: map[string]*slotList{}}
}

// list returns the slot's list for queue qs under its identity for its
// next move, a fresh identity when it has none of the current epoch.
func (s *slotState) list(ids *idents, qs *queueState) *slotList {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.identityLocked(ids)
	if qs.i >= len(s.cur) {
		s.cur = append(s.cur, make([]*slotList, qs.i+1-len(s.cur))...)
	}
	q := qs.key
	sl := s.cur[qs.i]
	if sl == nil {
		key := s.ident.listKey(q)
		sl = &slotList{key: key, ident: s.ident,
			move: []any{q, key, "RIGHT", "LEFT"}, rpl: []any{q, key},
			moveCmd: resp.AppendCmd(nil, "LMOVE", q, key, "RIGHT", "LEFT"), rplCmd: resp.AppendCmd(nil, "RPOPLPUSH", q, key),
			trimCmd: resp.AppendCmd(nil, "LTRIM", key, "0", "-2")}
		s.lists[key] = sl
		s.cur[qs.i] = sl
	}
	return sl
}

func (s *slotState) identityLocked(ids *idents) {
	if s.ident == nil || !ids.current(s.ident) {
		s.ident = ids.create()
		clear(s.cur)
		for key, sl := range s.lists {
			if len(sl.held) == 0 {
				delete(s.lists, key)
			}
		}
	}
}

// identity returns the slot's identity for its next move (see list).
func (s *slotState) identity(ids *idents) *listIdent {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.identityLocked(ids)
	return s.ident
}

// moved records a job moved into sl (the newest there).
func (s *slotState) moved(sl *slotList, raw []byte) *held {
	h := &held{raw: raw, sl: sl}
	s.mu.Lock()
	sl.held = append(sl.held, h)
	s.mu.Unlock()
	return h
}

// release forgets h once it has left its list (acknowledged, requeued or
// given up). A list of a past identity that no longer holds a job is
// forgotten.
func (s *slotState) release(h *held) {
	if h == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := h.sl
	i := slices.Index(sl.held, h)
	if i < 0 {
		return
	}
	sl.held = slices.Delete(sl.held, i, i+1)
	if len(sl.held) == 0 && sl.ident != s.ident {
		delete(s.lists, sl.key)
	}
}

// trimByPosition marks h acknowledged by position when every job before
// it in its list's mirror is too (h is then the oldest entry of the list
// once those have run), and reports whether it did. A job before it
// whose acknowledgement by value, or whose requeue, is still on its way
// makes it false: h's LTRIM could run first and take out that entry.
func (s *slotState) trimByPosition(h *held) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range h.sl.held {
		if o == h {
			h.trimmed = true
			return true
		}
		if !o.trimmed {
			return false
		}
	}
	return false
}

// heldIn adds the jobs the slot holds to in, by list.
func (s *slotState) heldIn(in map[string]map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sl := range s.lists {
		for _, h := range sl.held {
			add(in, sl.key, h.raw)
		}
	}
}

// uses adds the identities the slot uses (its own, and those of the jobs
// it holds) to in.
func (s *slotState) uses(in map[*listIdent]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ident != nil {
		in[s.ident] = true
	}
	for _, sl := range s.lists {
		if len(sl.held) > 0 {
			in[sl.ident] = true
		}
	}
}

func add(in map[string]map[string]int, list string, raw []byte) {
	if in[list] == nil {
		in[list] = map[string]int{}
	}
	in[list][string(raw)]++
}
