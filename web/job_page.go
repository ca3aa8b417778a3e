package web

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gojob/gojob/jobctl"
	"github.com/gojob/gojob/sidekiq/api"
)

type jobPageData struct {
	JID      string
	Location *jobctl.Location
	Status   *jobctl.Status
}

// jobPage shows where a job is and its status hash: progress, message,
// result, outcome (docs/job-control.md).
func (h *handler) jobPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	jid := r.PathValue("jid")
	loc, err := jobctl.Locate(ctx, h.api, jid)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	st, err := jobctl.ReadStatus(ctx, h.cfg.Pool, jid)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if loc == nil && st == nil {
		notFound(w, "job "+strconv.Quote(jid))
		return
	}
	h.render(w, r, "job", "Job "+jid, "busy", &jobPageData{JID: jid, Location: loc, Status: st})
}

// jobCancel cancels a job (api.Cancel): removed when waiting, cancelled
// where it runs.
func (h *handler) jobCancel(w http.ResponseWriter, r *http.Request) {
	jid := r.PathValue("jid")
	res, err := h.api.Cancel(r.Context(), jid)
	msg := ""
	switch {
	case errors.Is(err, api.ErrJobNotFound):
		msg = "job " + jid + " was found nowhere; a cancel is kept for a day in case it starts"
	case err != nil:
		h.fail(w, r, err)
		return
	case res.From == "running":
		msg = "asked the process running " + jid + " to cancel it"
	default:
		msg = "removed " + jid + " from " + res.From
	}
	h.redirectBack(w, r, backPath(r, "/jobs/"+url.PathEscape(jid)), msg)
}
