package web

import (
	"context"
	"encoding/json"
	"html/template"
	"net/http"
	"strconv"
	"strings"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/sidekiq/api"
)

// redisInfoFields are the INFO fields the dashboard shows, as Sidekiq's.
var redisInfoFields = []string{"redis_version", "uptime_in_days", "connected_clients", "used_memory_human", "used_memory_peak_human"}

type dashboardData struct {
	Stats     *api.Stats
	Days      int
	DayChoice []int
	Chart     template.HTML
	History   []api.DayStats
	Redis     [][2]string
	Processes []*api.Process
}

func (h *handler) dashboard(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	days, _ := strconv.Atoi(r.URL.Query().Get("days"))
	if days != 7 && days != 30 && days != 90 && days != 180 {
		days = 30
	}
	st, err := h.api.Stats(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	hist, err := h.api.History(ctx, days)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	procs, err := h.api.Processes(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	d := &dashboardData{Stats: st, Days: days, DayChoice: []int{7, 30, 90, 180}, Chart: historyChart(hist),
		History: hist, Redis: h.redisInfo(ctx), Processes: procs}
	h.render(w, r, "dashboard", "Dashboard", "dashboard", d)
}

// redisInfo reads the INFO fields the dashboard shows (empty when INFO is
// refused, as on some managed Redis).
func (h *handler) redisInfo(ctx context.Context) [][2]string {
	conn, err := h.cfg.Pool.GetContext(ctx)
	if err != nil {
		return nil
	}
	defer conn.Close()
	info, err := redis.String(redis.DoContext(conn, ctx, "INFO"))
	if err != nil {
		return nil
	}
	got := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok {
			got[k] = v
		}
	}
	var out [][2]string
	for _, k := range redisInfoFields {
		if v, ok := got[k]; ok {
			out = append(out, [2]string{k, v})
		}
	}
	return out
}

// statsJSON is what the dashboard's script polls to refresh its counters
// (the names of Sidekiq's /stats).
func (h *handler) statsJSON(w http.ResponseWriter, r *http.Request) {
	st, err := h.api.Stats(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(map[string]any{"sidekiq": map[string]any{
		"processed": st.Processed, "failed": st.Failed, "busy": st.Busy, "processes": st.Processes,
		"enqueued": st.Enqueued, "scheduled": st.Scheduled, "retries": st.Retries, "dead": st.Dead,
		"default_latency": st.DefaultQueueLatency.Seconds(),
	}})
}
