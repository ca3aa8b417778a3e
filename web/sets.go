package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/numfmt"
	"github.com/gojob/gojob/sidekiq/api"
)

// setKind is one of the pages over a sorted set: Retries, Scheduled, Dead.
type setKind struct {
	Path, Title string
	set         func(*api.API) *api.JobSet
	// ascending lists next due first (Retries, Scheduled); Dead lists the
	// newest death first, as Ruby's Web UI and JobSet.Page.
	ascending bool
	// actions are the per-entry buttons, in order.
	actions []string
	// bulk are the set-wide actions besides "delete_all", in button order.
	bulk []string
}

var setKinds = []*setKind{
	{Path: "retries", Title: "Retries", ascending: true, actions: []string{"retry", "kill", "delete"},
		set: (*api.API).RetrySet, bulk: []string{"retry_all", "kill_all"}},
	{Path: "scheduled", Title: "Scheduled", ascending: true, actions: []string{"add_to_queue", "delete"},
		set: (*api.API).ScheduledSet, bulk: []string{"add_all"}},
	{Path: "dead", Title: "Dead", actions: []string{"retry", "delete"},
		set: (*api.API).DeadSet, bulk: []string{"retry_all"}},
}

// actionLabels are the buttons' texts.
var actionLabels = map[string]string{
	"retry": "Retry now", "kill": "Kill", "delete": "Delete", "add_to_queue": "Add to queue",
	"retry_all": "Retry all", "kill_all": "Kill all", "add_all": "Add all to queue", "delete_all": "Delete all",
}

type setListData struct {
	Kind    *setKind
	Entries []*api.SortedEntry
	// Size is the set's size, or with a search the number of matches.
	Size   int64
	Pager  pager
	Search string
	// Bulk are the set-wide buttons; with a search they act on the
	// matches only and say so.
	Actions [][2]string
	Bulk    [][2]string
	// Progress is the set's bulk action, running or finished (nil: none).
	Progress *bulkStatus
	// KillDrops is how many dead jobs Kill all (of the set or the matches)
	// would make the dead set's cap drop; DeadCap says what the cap is.
	KillDrops int64
	DeadCap   string
}

func (k *setKind) labels(names []string) [][2]string {
	out := make([][2]string, len(names))
	for i, n := range names {
		out[i] = [2]string{n, actionLabels[n]}
	}
	return out
}

func (k *setKind) bulkNames() []string { return append(slices.Clone(k.bulk), "delete_all") }

// bulkLabels are the set-wide buttons' texts; on a search they name the
// matches ("Retry 1,234 matches").
func (k *setKind) bulkLabels(search string, matches int64) [][2]string {
	out := k.labels(k.bulkNames())
	if search == "" {
		return out
	}
	for i, l := range out {
		verb, _, _ := strings.Cut(l[1], " all")
		rest := ""
		if _, after, ok := strings.Cut(l[1], " all"); ok {
			rest = after
		}
		what := plural(int(matches), "match")
		if matches == 1 {
			what = "the 1 match"
		} else {
			what = "all " + what
		}
		out[i][1] = verb + " " + what + rest
	}
	return out
}

// killDrops is how many dead jobs killing n jobs now drops to keep the
// dead set within its limits (contract.KillDrops).
func (h *handler) killDrops(ctx context.Context, n int64) (int64, error) {
	conn, err := h.cfg.Pool.GetContext(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	return contract.KillDrops(ctx, conn, h.clock.Now(), h.api.DeadLimits(), n)
}

func (h *handler) setList(k *setKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		set := k.set(h.api)
		d := &setListData{Kind: k, Search: strings.TrimSpace(r.URL.Query().Get("q")), Actions: k.labels(k.actions)}
		var err error
		if d.Progress, err = h.bulk.status(ctx, k); err != nil {
			h.cfg.Logger.Warn().Err(err).Str("component", "web").Msg("could not read the bulk action's progress")
		}
		if d.Search != "" {
			page, _ := strconv.Atoi(r.URL.Query().Get("page"))
			page = max(page, 1)
			filter := &api.Filter{Text: d.Search}
			entries, total, err := set.Page(ctx, filter, (page-1)*pageSize, pageSize)
			if err != nil {
				h.fail(w, r, err)
				return
			}
			var off int
			d.Pager, off = newPager(r, total)
			if off != (page-1)*pageSize {
				// Past the last page: show the last.
				if entries, total, err = set.Page(ctx, filter, off, pageSize); err != nil {
					h.fail(w, r, err)
					return
				}
			}
			d.Entries, d.Size = entries, total
		} else {
			size, err := set.Size(ctx)
			if err != nil {
				h.fail(w, r, err)
				return
			}
			var off int
			d.Pager, off = newPager(r, size)
			if d.Entries, d.Size, err = set.Page(ctx, nil, off, pageSize); err != nil {
				h.fail(w, r, err)
				return
			}
		}
		d.Bulk = k.bulkLabels(d.Search, d.Size)
		if slices.Contains(k.bulk, "kill_all") {
			if d.KillDrops, err = h.killDrops(ctx, d.Size); err != nil {
				h.fail(w, r, err)
				return
			}
			lim := h.api.DeadLimits()
			d.DeadCap = fmt.Sprintf("the dead set keeps at most %s for %s (Sidekiq's dead_max_jobs)",
				plural(lim.MaxJobs-1, "job"), humanDuration(lim.Timeout))
		}
		h.render(w, r, "set", k.Title, k.Path, d)
	}
}

// find loads the entry of a "<score>-<jid>" key.
func (h *handler) find(ctx context.Context, k *setKind, key string) (*api.SortedEntry, error) {
	score, jid, ok := parseSetKey(key)
	if !ok {
		return nil, nil
	}
	entries, err := k.set(h.api).Fetch(ctx, score, jid)
	if err != nil || len(entries) == 0 {
		return nil, err
	}
	return entries[0], nil
}

func (h *handler) setEntry(k *setKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		e, err := h.find(r.Context(), k, r.PathValue("key"))
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if e == nil {
			notFound(w, "job "+r.PathValue("key")+" in "+k.Title)
			return
		}
		loc := &api.Location{Where: k.set(h.api).Name(), Queue: e.Queue, At: e.At(), Raw: e.Value, Job: e.Job, Entry: e}
		d := &jobPageData{JID: e.JID(), Location: loc, Record: e.JobRecord, Kind: k, Entry: e, Actions: k.labels(k.actions)}
		if err := h.fillJobPage(r.Context(), d); err != nil {
			h.fail(w, r, err)
			return
		}
		h.render(w, r, "job", k.Title+": "+e.DisplayClass(), k.Path, d)
	}
}

// apply runs one per-entry action; a kill returns the dead jobs the dead
// set's cap dropped to make room.
func (h *handler) apply(ctx context.Context, k *setKind, e *api.SortedEntry, action string) (int64, error) {
	if !slices.Contains(k.actions, action) {
		return 0, fmt.Errorf("unknown action %q for %s", action, k.Title)
	}
	var err error
	switch action {
	case "retry", "add_to_queue":
		// Retry of a scheduled entry is the Web UI's "Add to queue".
		_, err = e.Retry(ctx)
	case "kill":
		return e.Kill(ctx, nil)
	case "delete":
		_, err = e.Delete(ctx)
	}
	return 0, err
}

// droppedNote is the tail of a message when a kill made the dead set's
// cap drop jobs.
func droppedNote(n int64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; the dead set's cap dropped %s, the oldest", plural(int(n), "dead job"))
}

func (h *handler) setEntryAction(k *setKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		action := r.PostFormValue("action")
		if !slices.Contains(k.actions, action) {
			http.Error(w, fmt.Sprintf("unknown action %q for %s", action, k.Title), http.StatusBadRequest)
			return
		}
		e, err := h.find(ctx, k, r.PathValue("key"))
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if e == nil {
			h.redirectBack(w, r, "/"+k.Path, "the job was no longer there (processed, moved or deleted meanwhile)")
			return
		}
		dropped, err := h.apply(ctx, k, e, action)
		if err != nil && !errors.Is(err, api.ErrJobNotFound) {
			h.fail(w, r, err)
			return
		}
		h.redirectBack(w, r, "/"+k.Path, fmt.Sprintf("%s: %s %s%s", actionLabels[action], e.Class(), e.JID(), droppedNote(dropped)))
	}
}

// setBulk runs an action on the checked entries (key=… repeated), or
// starts a bulk action (the "… all" buttons) in the background, on the
// whole set or, with q, on the search's matches only.
func (h *handler) setBulk(k *setKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if err := r.ParseForm(); err != nil {
			http.Error(w, "the form could not be read: "+err.Error(), http.StatusBadRequest)
			return
		}
		action := r.PostFormValue("action")
		back := backPath(r, "/"+k.Path)
		q := strings.TrimSpace(r.PostFormValue("q"))
		if slices.Contains(k.bulkNames(), action) {
			if action == "delete_all" && q == "" {
				// The whole set goes at once (UNLINK): nothing to wait for.
				if st, _ := h.bulk.status(ctx, k); st != nil && st.Running() {
					h.redirectBack(w, r, back, (&errBulkRunning{st: st}).Error())
					return
				}
				if err := k.set(h.api).Clear(ctx); err != nil {
					h.fail(w, r, err)
					return
				}
				h.redirectBack(w, r, "/"+k.Path, "deleted every job in "+k.Title)
				return
			}
			if err := h.bulk.start(ctx, k, action, q); err != nil {
				var busy *errBulkRunning
				if errors.As(err, &busy) {
					h.redirectBack(w, r, back, busy.Error())
					return
				}
				h.fail(w, r, err)
				return
			}
			msg := actionLabels[action] + " started in the background; its progress shows below"
			if q != "" {
				msg = fmt.Sprintf("%s (jobs matching “%s”) started in the background; its progress shows below", actionLabels[action], q)
			}
			h.redirectBack(w, r, back, msg)
			return
		}
		if !slices.Contains(k.actions, action) {
			http.Error(w, fmt.Sprintf("unknown action %q for %s", action, k.Title), http.StatusBadRequest)
			return
		}
		keys := r.PostForm["key"]
		if len(keys) == 0 {
			h.redirectBack(w, r, back, "no job selected: tick the boxes of the jobs first")
			return
		}
		done, gone := 0, 0
		var dropped int64
		for _, key := range keys {
			e, err := h.find(ctx, k, key)
			if err != nil {
				h.fail(w, r, err)
				return
			}
			if e == nil {
				gone++
				continue
			}
			n, err := h.apply(ctx, k, e, action)
			dropped += n
			if err != nil {
				if errors.Is(err, api.ErrJobNotFound) {
					gone++
					continue
				}
				h.fail(w, r, err)
				return
			}
			done++
		}
		msg := fmt.Sprintf("%s: %s", actionLabels[action], plural(done, "job"))
		if gone > 0 {
			msg += fmt.Sprintf(" (%s no longer there)", numfmt.Int(int64(gone)))
		}
		msg += droppedNote(dropped)
		h.redirectBack(w, r, back, msg)
	}
}
