package web

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gojob/gojob/batch"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/jobctl"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/wire"
)

// jobPageData is the one job page: what a job is (its class and
// arguments as Sidekiq's Web UI shows them, times, error, backtrace),
// where it is now, its batch and its status hash, and the actions valid
// where it is. /jobs/JID finds the job wherever it is (api.Locate);
// /retries/KEY, /scheduled/KEY and /dead/KEY show one set entry.
type jobPageData struct {
	JID string
	// Location is where the job is, nil when it is no longer in Redis
	// (only its status is left).
	Location *api.Location
	// Record is the job as stored, nil with Location.
	Record *api.JobRecord
	// Kind and Entry are the set of a set entry, for its actions; Actions
	// are those valid there.
	Kind    *setKind
	Entry   *api.SortedEntry
	Actions [][2]string
	// Cancel: a Cancel button is valid (running, orphaned, queued).
	Cancel string
	Status *jobctl.Status
	// BatchID is the job's batch; Batch its state, nil when the batch is
	// gone.
	BatchID   string
	Batch     *batchRow
	Backtrace []string
	// BacktraceErr says why the backtrace could not be decoded.
	BacktraceErr string
}

// navFor is the navigation tab of where a job is.
var navFor = map[string]string{
	"running": "busy", "orphaned": "busy", "queue": "queues",
	"retry": "retries", "schedule": "scheduled", "dead": "dead",
}

// jobPage shows a job wherever it is.
func (h *handler) jobPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	jid := r.PathValue("jid")
	loc, err := h.api.Locate(ctx, jid)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	d := &jobPageData{JID: jid, Location: loc}
	if loc != nil {
		if loc.Entry != nil {
			d.Entry = loc.Entry
			d.Record = loc.Entry.JobRecord
			for _, k := range setKinds {
				if k.set(h.api).Name() == loc.Where {
					d.Kind, d.Actions = k, k.labels(k.actions)
				}
			}
		} else {
			d.Record = &api.JobRecord{Queue: loc.Queue, Value: loc.Raw, Job: loc.Job}
		}
		switch loc.Where {
		case "running", "orphaned":
			d.Cancel = "Cancel"
		case "queue":
			d.Cancel = "Delete from queue"
		}
	}
	if err := h.fillJobPage(ctx, d); err != nil {
		h.fail(w, r, err)
		return
	}
	if loc == nil && d.Status == nil {
		notFound(w, "job "+strconv.Quote(jid))
		return
	}
	title := "Job " + jid
	if d.Record != nil && d.Record.Job != nil {
		title = d.Record.DisplayClass() + " " + jid
	}
	nav := ""
	if loc != nil {
		nav = navFor[loc.Where]
	}
	h.render(w, r, "job", title, nav, d)
}

// fillJobPage adds what every job page shows besides the job: its status
// hash, its batch and its backtrace decoded.
func (h *handler) fillJobPage(ctx context.Context, d *jobPageData) error {
	var err error
	if d.Status, err = jobctl.ReadStatus(ctx, h.cfg.Pool, d.JID); err != nil {
		return err
	}
	if d.Record == nil || d.Record.Job == nil {
		return nil
	}
	job := d.Record.Job
	if job.Has("error_backtrace") {
		if d.Backtrace, err = job.ErrorBacktrace(); err != nil {
			d.BacktraceErr = err.Error()
		}
	}
	d.BatchID = jobBatch(job)
	if d.BatchID != "" {
		b, err := h.batches()
		if err != nil {
			return err
		}
		st, err := b.Status(ctx, d.BatchID)
		switch {
		case errors.Is(err, batch.ErrNotFound):
		case err != nil:
			return err
		default:
			row := newBatchRow(st)
			d.Batch = &row
		}
	}
	return nil
}

// jobBatch is the batch a job belongs to (contract.BatchPayloadKey), "" when
// none.
func jobBatch(j *wire.Job) string {
	v, ok := j.Get(contract.BatchPayloadKey)
	if !ok {
		return ""
	}
	s, _ := v.Str()
	return s
}

// jobCancel cancels a job (api.Cancel): removed when waiting, cancelled
// where it runs.
func (h *handler) jobCancel(w http.ResponseWriter, r *http.Request) {
	jid := r.PathValue("jid")
	loc, err := h.api.Cancel(r.Context(), jid)
	msg := ""
	switch {
	case errors.Is(err, api.ErrJobNotFound) && loc != nil && loc.Where == "dead":
		msg = "job " + jid + " is in the dead set already; a cancel is kept for a day in case it is retried"
	case errors.Is(err, api.ErrJobNotFound):
		msg = "job " + jid + " was found nowhere; a cancel is kept for a day in case it starts"
	case err != nil:
		h.fail(w, r, err)
		return
	case loc.Where == "running":
		msg = "asked the process running " + jid + " to cancel it"
	case loc.Where == "orphaned":
		msg = "job " + jid + " is cancelled when it runs again (its process is gone)"
	case loc.Where == "queue":
		msg = "removed " + jid + " from queue:" + loc.Queue
	default:
		msg = "removed " + jid + " from " + loc.Where
	}
	h.redirectBack(w, r, backPath(r, "/jobs/"+url.PathEscape(jid)), msg)
}
