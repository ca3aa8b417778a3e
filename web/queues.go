package web

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/gojob/gojob/internal/queuelist"
	"github.com/gojob/gojob/sidekiq/api"
)

const pageSize = 25

type queueRow struct {
	Name    string
	Size    int64
	Latency time.Duration
	Paused  bool
	Err     string
	// Retries, Scheduled and Dead count the queue's jobs in those sets.
	Retries, Scheduled, Dead int64
}

func (h *handler) queues(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	// A queue whose jobs are all in the retry, schedule and dead sets (not
	// in the queues set) gets a row too.
	qs, counts, err := queuelist.List(ctx, h.api, h.cfg.Pool)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	paused, err := h.api.PausedQueues(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	rows := make([]queueRow, 0, len(qs))
	for _, q := range qs {
		row := queueRow{Name: q.Name(), Paused: slices.Contains(paused, q.Name()),
			Retries: counts[0][q.Name()], Scheduled: counts[1][q.Name()], Dead: counts[2][q.Name()]}
		if row.Size, err = q.Size(ctx); err != nil {
			h.fail(w, r, err)
			return
		}
		if row.Latency, err = q.Latency(ctx); err != nil {
			// An unparsable oldest job: show the queue anyway.
			row.Err = problem(err)
		}
		rows = append(rows, row)
	}
	h.render(w, r, "queues", "Queues", "queues", rows)
}

type queueData struct {
	Name   string
	Paused bool
	// Records are the page's jobs; Size is the queue's length when they
	// were read.
	Records []*api.JobRecord
	Size    int64
	Pager   pager
	Latency time.Duration
}

// pager is a page number with its neighbours.
type pager struct {
	Page, Pages int
	Base        string // path and query without page=
}

func newPager(r *http.Request, size int64) (pager, int) {
	p, _ := strconv.Atoi(r.URL.Query().Get("page"))
	pages := int((size + pageSize - 1) / pageSize)
	p = max(1, min(p, max(pages, 1)))
	q := r.URL.Query()
	q.Del("page")
	q.Del("flash")
	base := r.URL.EscapedPath() + "?"
	if enc := q.Encode(); enc != "" {
		base += enc + "&"
	}
	return pager{Page: p, Pages: pages, Base: base}, (p - 1) * pageSize
}

func (h *handler) queue(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	name := r.PathValue("name")
	q := h.api.Queue(name)
	size, err := q.Size(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	pg, off := newPager(r, size)
	records, size, err := q.Page(ctx, nil, off, pageSize)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	paused, err := h.api.PausedQueues(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	lat, _ := q.Latency(ctx)
	d := &queueData{Name: name, Paused: slices.Contains(paused, name), Records: records, Size: size, Pager: pg, Latency: lat}
	h.render(w, r, "queue", "Queue "+name, "queues", d)
}

// queueAction deletes one job (by its exact JSON, as the Web UI), clears
// the queue, or pauses / unpauses it (docs/queue-pause.md).
func (h *handler) queueAction(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	name := r.PathValue("name")
	q := h.api.Queue(name)
	back := backPath(r, "/queues/"+pathSegment(name))
	var msg string
	switch r.PostFormValue("action") {
	case "delete":
		ok, err := q.DeleteJob(ctx, []byte(r.PostFormValue("value")))
		if err != nil {
			h.fail(w, r, err)
			return
		}
		msg = "deleted 1 job"
		if !ok {
			msg = "the job was no longer in the queue"
		}
	case "clear":
		if err := q.Clear(ctx); err != nil {
			h.fail(w, r, err)
			return
		}
		msg, back = fmt.Sprintf("cleared queue %s", name), "/queues"
	case "pause":
		if err := q.Pause(ctx); err != nil {
			h.fail(w, r, err)
			return
		}
		msg = "paused " + name + ": gojob processes stop fetching from it within a second (Ruby processes do not know pauses)"
	case "unpause":
		if err := q.Unpause(ctx); err != nil {
			h.fail(w, r, err)
			return
		}
		msg = "unpaused " + name
	default:
		http.Error(w, `action must be "delete", "clear", "pause" or "unpause"`, http.StatusBadRequest)
		return
	}
	h.redirectBack(w, r, back, msg)
}
