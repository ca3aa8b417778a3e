package web

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gojob/gojob/internal/orderedstore"
)

// orderedRow is one ordered queue on the Ordered page.
type orderedRow struct {
	*orderedstore.QueueStatus
	Name string
	Err  string
}

// orderedList shows every ordered queue (docs/ordered.md) with its
// counts, lag and morgue size, from orderedstore.Status.
func (h *handler) orderedList(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	qs, err := orderedstore.Queues(ctx, h.cfg.Pool)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	rows := make([]orderedRow, 0, len(qs))
	now := h.clock.Now()
	for _, q := range qs {
		row := orderedRow{Name: q}
		if row.QueueStatus, err = orderedstore.Status(ctx, h.cfg.Pool, q, now); err != nil {
			// One queue that cannot be read (half created, a bad name)
			// does not hide the others.
			row.Err = problem(err)
		}
		rows = append(rows, row)
	}
	h.render(w, r, "ordered", "Ordered queues", "ordered", rows)
}

type orderedQueueData struct {
	Status *orderedstore.QueueStatus
	Morgue []orderedstore.MorgueEntry
	Pager  pager
}

// orderedQueue shows one ordered queue: its shards with their owner,
// fencing token and lease left, and its morgue, newest burial first.
func (h *handler) orderedQueue(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.PathValue("queue")
	st, err := orderedstore.Status(ctx, h.cfg.Pool, q, h.clock.Now())
	if h.failed(w, r, err, "ordered queue "+strconv.Quote(q), orderedstore.ErrNoQueue, orderedstore.ErrBadQueueName) {
		return
	}
	pg, off := newPager(r, int64(st.MorgueKeys))
	morgue, err := orderedstore.Morgue(ctx, h.cfg.Pool, q, &orderedstore.MorgueParams{Offset: off, Limit: pageSize})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.render(w, r, "ordered_queue", "Ordered queue "+q, "ordered", &orderedQueueData{Status: st, Morgue: morgue, Pager: pg})
}

// orderedAction requeues or deletes the morgue's payloads of one key, or
// of every key with all=1, through orderedstore.MorgueApply.
func (h *handler) orderedAction(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.PathValue("queue")
	action := orderedstore.MorgueAction(r.PostFormValue("action"))
	if action != orderedstore.MorgueRequeue && action != orderedstore.MorgueDelete {
		http.Error(w, `action must be "requeue" or "delete"`, http.StatusBadRequest)
		return
	}
	var keys []string
	what := "every key"
	if r.PostFormValue("all") != "1" {
		key := r.PostFormValue("key")
		if key == "" {
			http.Error(w, `give the ordering key ("key"), or all=1 for the whole morgue`, http.StatusBadRequest)
			return
		}
		keys, what = []string{key}, "key "+key
	}
	n, err := orderedstore.MorgueApply(ctx, h.cfg.Pool, q, action, keys, h.clock.Now())
	if h.failed(w, r, err, "ordered queue "+strconv.Quote(q), orderedstore.ErrNoQueue, orderedstore.ErrBadQueueName) {
		return
	}
	verb := "requeued"
	if action == orderedstore.MorgueDelete {
		verb = "deleted"
	}
	msg := fmt.Sprintf("%s %s of %s from the morgue", verb, plural(n, "payload"), what)
	h.redirectBack(w, r, backPath(r, "/ordered/"+url.PathEscape(q)), msg)
}
