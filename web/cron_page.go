package web

import (
	"net/http"

	"github.com/gojob/gojob/cron"
)

func (h *handler) cronList(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Cron == nil {
		notFound(w, "cron page (no cron store configured)")
		return
	}
	jobs, err := h.cfg.Cron.List(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.render(w, r, "cron", "Cron", "cron", map[string]any{"Jobs": jobs, "Layout": h.cfg.Cron.Layout.String()})
}

// cronAction enables, disables or pushes now one periodic job.
func (h *handler) cronAction(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Cron == nil {
		notFound(w, "cron page (no cron store configured)")
		return
	}
	ctx, name := r.Context(), r.PathValue("name")
	var err error
	msg := ""
	switch r.PostFormValue("action") {
	case "enable":
		err, msg = h.cfg.Cron.SetEnabled(ctx, name, true), "enabled "+name
	case "disable":
		err, msg = h.cfg.Cron.SetEnabled(ctx, name, false), "disabled "+name
	case "run_now":
		var jid string
		jid, err = h.cfg.Cron.RunNow(ctx, name)
		msg = "pushed " + name + " now (jid " + jid + ")"
	default:
		http.Error(w, `action must be "enable", "disable" or "run_now"`, http.StatusBadRequest)
		return
	}
	if h.failed(w, r, err, "periodic job "+name, cron.ErrNotFound) {
		return
	}
	h.redirectBack(w, r, "/cron", msg)
}
