package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

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
	// bulk runs a set-wide action ("retry_all", "kill_all", "add_all").
	bulk map[string]func(context.Context, *api.JobSet) (*api.BulkActionResult, error)
}

// retryAll pushes every entry now: "Retry all", and "Add all to queue" of
// the schedule set.
func retryAll(ctx context.Context, s *api.JobSet) (*api.BulkActionResult, error) {
	return s.RetryAll(ctx)
}

// killAll moves every entry to the dead set ("Kill all").
func killAll(ctx context.Context, s *api.JobSet) (*api.BulkActionResult, error) {
	return s.KillAll(ctx, nil)
}

var setKinds = []*setKind{
	{Path: "retries", Title: "Retries", ascending: true, actions: []string{"retry", "kill", "delete"},
		set: (*api.API).RetrySet,
		bulk: map[string]func(context.Context, *api.JobSet) (*api.BulkActionResult, error){
			"retry_all": retryAll,
			"kill_all":  killAll,
		}},
	{Path: "scheduled", Title: "Scheduled", ascending: true, actions: []string{"add_to_queue", "delete"},
		set:  (*api.API).ScheduledSet,
		bulk: map[string]func(context.Context, *api.JobSet) (*api.BulkActionResult, error){"add_all": retryAll}},
	{Path: "dead", Title: "Dead", actions: []string{"retry", "delete"},
		set:  (*api.API).DeadSet,
		bulk: map[string]func(context.Context, *api.JobSet) (*api.BulkActionResult, error){"retry_all": retryAll}},
}

// actionLabels are the buttons' texts.
var actionLabels = map[string]string{
	"retry": "Retry now", "kill": "Kill", "delete": "Delete", "add_to_queue": "Add to queue",
	"retry_all": "Retry all", "kill_all": "Kill all", "add_all": "Add all to queue", "delete_all": "Delete all",
}

type setListData struct {
	Kind    *setKind
	Entries []*api.SortedEntry
	Size    int64
	Pager   pager
	Search  string
	// Limited is set when a search found more than it shows.
	Limited bool
	Actions [][2]string
	Bulk    [][2]string
}

const searchLimit = 200

func (k *setKind) labels(names []string) [][2]string {
	out := make([][2]string, len(names))
	for i, n := range names {
		out[i] = [2]string{n, actionLabels[n]}
	}
	return out
}

func (k *setKind) bulkNames() []string {
	names := make([]string, 0, len(k.bulk)+1)
	for n := range k.bulk {
		names = append(names, n)
	}
	slices.Sort(names)
	slices.Reverse(names) // retry_all before kill_all
	return append(names, "delete_all")
}

func (h *handler) setList(k *setKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		set := k.set(h.api)
		d := &setListData{Kind: k, Search: strings.TrimSpace(r.URL.Query().Get("q")),
			Actions: k.labels(k.actions), Bulk: k.labels(k.bulkNames())}
		if d.Search != "" {
			// Ruby's filter: a raw-JSON substring match (ZSCAN MATCH), so a
			// jid, a class or an argument all find their jobs.
			errStop := errors.New("stop")
			err := set.Scan(ctx, escapeGlob(d.Search), func(e *api.SortedEntry) error {
				if len(d.Entries) == searchLimit {
					d.Limited = true
					return errStop
				}
				d.Entries = append(d.Entries, e)
				return nil
			})
			if err != nil && !errors.Is(err, errStop) {
				h.fail(w, r, err)
				return
			}
			slices.SortStableFunc(d.Entries, func(a, b *api.SortedEntry) int {
				if k.ascending {
					return compareFloat(a.Score, b.Score)
				}
				return compareFloat(b.Score, a.Score)
			})
			d.Size = int64(len(d.Entries))
		} else {
			size, err := set.Size(ctx)
			if err != nil {
				h.fail(w, r, err)
				return
			}
			var off int
			d.Pager, off = newPager(r, size)
			if d.Entries, d.Size, err = set.Page(ctx, off, pageSize); err != nil {
				h.fail(w, r, err)
				return
			}
		}
		h.render(w, r, "set", k.Title, k.Path, d)
	}
}

func compareFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// escapeGlob escapes ZSCAN MATCH's special characters, so a search is a
// plain substring.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
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

type setEntryData struct {
	Kind      *setKind
	Entry     *api.SortedEntry
	Backtrace []string
	// BacktraceErr says why the backtrace could not be decoded.
	BacktraceErr string
	Actions      [][2]string
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
		d := &setEntryData{Kind: k, Entry: e, Actions: k.labels(k.actions)}
		if e.Job != nil && e.Job.Has("error_backtrace") {
			if d.Backtrace, err = e.Job.ErrorBacktrace(); err != nil {
				d.BacktraceErr = err.Error()
			}
		}
		h.render(w, r, "entry", k.Title+": "+e.Class(), k.Path, d)
	}
}

// apply runs one per-entry action.
func (h *handler) apply(ctx context.Context, k *setKind, e *api.SortedEntry, action string) error {
	if !slices.Contains(k.actions, action) {
		return fmt.Errorf("unknown action %q for %s", action, k.Title)
	}
	var err error
	switch action {
	case "retry", "add_to_queue":
		// Retry of a scheduled entry is the Web UI's "Add to queue".
		_, err = e.Retry(ctx)
	case "kill":
		err = e.Kill(ctx, nil)
	case "delete":
		_, err = e.Delete(ctx)
	}
	return err
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
			redirectBack(w, r, "/"+k.Path, "the job was no longer there (processed, moved or deleted meanwhile)")
			return
		}
		if err := h.apply(ctx, k, e, action); err != nil && !errors.Is(err, api.ErrJobNotFound) {
			h.fail(w, r, err)
			return
		}
		redirectBack(w, r, "/"+k.Path, fmt.Sprintf("%s: %s %s", actionLabels[action], e.Class(), e.JID()))
	}
}

// setBulk runs an action on the checked entries (key=… repeated) or on the
// whole set (the "… all" buttons).
func (h *handler) setBulk(k *setKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		action := r.PostFormValue("action")
		back := backPath(r, "/"+k.Path)
		if action == "delete_all" {
			if err := k.set(h.api).Clear(ctx); err != nil {
				h.fail(w, r, err)
				return
			}
			redirectBack(w, r, "/"+k.Path, "deleted every job in "+k.Title)
			return
		}
		if f, ok := k.bulk[action]; ok {
			res, err := f(ctx, k.set(h.api))
			if err != nil {
				h.fail(w, r, err)
				return
			}
			msg := fmt.Sprintf("%s: %s", actionLabels[action], plural(res.Moved, "job"))
			if res.Remaining > 0 {
				msg += fmt.Sprintf(" (%d left: unparsable or new)", res.Remaining)
			}
			redirectBack(w, r, "/"+k.Path, msg)
			return
		}
		if !slices.Contains(k.actions, action) {
			http.Error(w, fmt.Sprintf("unknown action %q for %s", action, k.Title), http.StatusBadRequest)
			return
		}
		keys := r.PostForm["key"]
		if len(keys) == 0 {
			redirectBack(w, r, back, "no job selected: tick the boxes of the jobs first")
			return
		}
		done, gone := 0, 0
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
			if err := h.apply(ctx, k, e, action); err != nil {
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
			msg += fmt.Sprintf(" (%d no longer there)", gone)
		}
		redirectBack(w, r, back, msg)
	}
}
