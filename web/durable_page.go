package web

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gojob/gojob/durable"
	"github.com/gojob/gojob/sidekiq/api"
)

type durableRow struct {
	*durable.Row
	// State is missing, overdue, running or waiting (durable.DatabaseStatus).
	State string
}

type durableData struct {
	Status   *durable.Status
	Rows     []durableRow
	RowsErr  string
	Lost     []*api.SortedEntry
	LostMore bool
}

const lostLimit = 50

// durablePage shows each database's counts, its rows (earliest deadline
// first) and the jobs the reconciler found lost (dead-set entries with
// durable_killed_at).
func (h *handler) durablePage(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Durable == nil {
		notFound(w, "durable page (start gojob web with --durable DBURL)")
		return
	}
	ctx := r.Context()
	st, err := h.cfg.Durable.Status(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	d := &durableData{Status: st}
	rows, err := h.cfg.Durable.Rows(ctx, 100)
	if err != nil {
		d.RowsErr = problem(err)
	}
	for _, row := range rows {
		d.Rows = append(d.Rows, durableRow{Row: row, State: rowState(row, st.Now)})
	}
	if d.Lost, d.LostMore, err = h.lostJobs(ctx); err != nil {
		h.fail(w, r, err)
		return
	}
	h.render(w, r, "durable", "Durable", "durable", d)
}

func rowState(r *durable.Row, now time.Time) string {
	switch {
	case r.MissingAt != nil:
		return "missing"
	case !r.AssumeDeadAt.After(now):
		return "overdue"
	case r.LockedBy != "":
		return "running"
	default:
		return "waiting"
	}
}

// lostJobs scans the dead set for the entries the reconciler killed.
func (h *handler) lostJobs(ctx context.Context) ([]*api.SortedEntry, bool, error) {
	var out []*api.SortedEntry
	more := false
	errStop := errors.New("stop")
	err := h.api.DeadSet().Scan(ctx, `*"durable_killed_at"*`, func(e *api.SortedEntry) error {
		if e.Job == nil || !e.Job.Has("durable_killed_at") {
			return nil
		}
		if len(out) == lostLimit {
			more = true
			return errStop
		}
		out = append(out, e)
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, false, err
	}
	return out, more, nil
}
