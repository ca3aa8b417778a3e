package web

import (
	"fmt"
	"net/http"

	"github.com/gojob/gojob/sidekiq/api"
)

type busyData struct {
	Processes []*api.Process
	Work      []*api.Work
	// Busy, Concurrency and RSS (KB) are the processes' sums.
	Busy, Concurrency, RSS int64
	Leader                 string
}

func (h *handler) busy(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	procs, err := h.api.Processes(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	work, err := h.api.Running(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	leader, _ := h.api.Leader(ctx)
	d := &busyData{Processes: procs, Work: work, Leader: leader}
	for _, p := range procs {
		d.Busy += p.Busy
		d.Concurrency += p.Concurrency
		d.RSS += p.RSS
	}
	h.render(w, r, "busy", "Busy", "busy", d)
}

// busyAction quiets or stops one process (identity) or every live one
// (all), as the Web UI's Busy page: a TSTP or TERM pushed to
// <identity>-signals, picked up at the process's next heartbeat.
func (h *handler) busyAction(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	action := r.PostFormValue("action")
	if action != "quiet" && action != "stop" {
		http.Error(w, `action must be "quiet" or "stop"`, http.StatusBadRequest)
		return
	}
	procs, err := h.api.Processes(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	identity, all := r.PostFormValue("identity"), r.PostFormValue("all") != ""
	if !all && identity == "" {
		http.Error(w, "identity or all is required", http.StatusBadRequest)
		return
	}
	n := 0
	for _, p := range procs {
		if !all && p.Identity != identity {
			continue
		}
		if p.Embedded {
			continue
		}
		if action == "quiet" {
			err = p.Quiet(ctx)
		} else {
			err = p.Stop(ctx)
		}
		if err != nil {
			h.fail(w, r, err)
			return
		}
		n++
	}
	if !all && n == 0 {
		notFound(w, fmt.Sprintf("live process %q", identity))
		return
	}
	h.redirectBack(w, r, backPath(r, "/busy"), fmt.Sprintf("asked %s to %s (processes react at their next heartbeat, within about 5 s)", plural(n, "process"), action))
}
