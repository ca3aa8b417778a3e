package web

import (
	"net/http"
	"strconv"

	"github.com/gojob/gojob/batch"
)

// batchRow is a batch with its progress, for the Batches pages.
type batchRow struct {
	*batch.Status
	// Done is the percentage of members that ran to their end.
	Done int64
	// State is the batch's state in words.
	State string
}

func newBatchRow(st *batch.Status) batchRow {
	r := batchRow{Status: st, State: "running"}
	if st.Total > 0 {
		r.Done = 100 * (st.Succeeded + st.Dead) / st.Total
	}
	switch {
	case st.SuccessAt != nil:
		r.State = "succeeded"
	case st.CompleteAt != nil:
		r.State = "complete, with deaths"
	case !st.Sealed:
		r.State = "open"
	}
	return r
}

func (h *handler) batches() (*batch.Batches, error) {
	return batch.New(&batch.Config{Client: h.api.Client()})
}

// batchList shows the batches, newest first (docs/batches.md).
func (h *handler) batchList(w http.ResponseWriter, r *http.Request) {
	b, err := h.batches()
	if err != nil {
		h.fail(w, r, err)
		return
	}
	page, _ := strconv.Atoi(r.URL.Query().Get("page"))
	page = max(page, 1)
	list, err := b.List(r.Context(), (page-1)*pageSize, pageSize)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	rows := make([]batchRow, len(list))
	for i, st := range list {
		rows[i] = newBatchRow(st)
	}
	h.render(w, r, "batches", "Batches", "batches", rows)
}

// batchPage shows one batch; a sealed batch with pending jobs is
// reconciled first (deaths its death handler missed).
func (h *handler) batchPage(w http.ResponseWriter, r *http.Request) {
	b, err := h.batches()
	if err != nil {
		h.fail(w, r, err)
		return
	}
	bid := r.PathValue("bid")
	st, err := b.Status(r.Context(), bid)
	if err == nil && st.Sealed && st.Pending > 0 && !h.cfg.ReadOnly {
		st, err = b.Reconcile(r.Context(), bid)
	}
	if h.failed(w, r, err, "batch "+strconv.Quote(bid), batch.ErrNotFound) {
		return
	}
	d := &batchPageData{batchRow: newBatchRow(st)}
	var nPending, nDead int
	d.PendingJobs, d.DeadJobs, nPending, nDead, err = b.Members(r.Context(), bid, batchMembersShown)
	d.NPending, d.NDead = int64(nPending), int64(nDead)
	if h.failed(w, r, err, "batch "+strconv.Quote(bid), batch.ErrNotFound) {
		return
	}
	h.render(w, r, "batch", "Batch "+bid, "batches", d)
}

// batchMembersShown is how many pending and dead jobs the batch page
// lists, of each.
const batchMembersShown = 100

// batchPageData is a batch with its pending and dead members.
type batchPageData struct {
	batchRow
	PendingJobs, DeadJobs []*batch.Member
	NPending, NDead       int64
}
