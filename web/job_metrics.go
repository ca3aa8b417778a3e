package web

import (
	"html/template"
	"net/http"
	"strconv"

	"github.com/gojob/gojob/sidekiq/api"
)

type jobMetricsData struct {
	Minutes int
	Choice  []int
	Metrics *api.JobMetrics
	Class   string
	Chart   template.HTML
	// Total is Class's row.
	Total api.ClassMetrics
	// HistogramErr says why the histogram could not be read.
	HistogramErr string
}

func metricsMinutes(r *http.Request) int {
	m, _ := strconv.Atoi(r.URL.Query().Get("minutes"))
	if m != 60 && m != 180 && m != 480 {
		m = 60
	}
	return m
}

// jobMetrics lists per-class totals of the window (Sidekiq 7+'s Metrics
// tab).
func (h *handler) jobMetrics(w http.ResponseWriter, r *http.Request) {
	mins := metricsMinutes(r)
	m, err := h.api.JobMetrics(r.Context(), mins, "")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.render(w, r, "job_metrics", "Metrics", "metrics", &jobMetricsData{Minutes: mins, Choice: []int{60, 180, 480}, Metrics: m})
}

// jobMetricsClass shows one class with its execution-time histogram.
func (h *handler) jobMetricsClass(w http.ResponseWriter, r *http.Request) {
	mins := metricsMinutes(r)
	class := r.PathValue("class")
	m, err := h.api.JobMetrics(r.Context(), mins, class)
	histErr := ""
	if err != nil {
		// A Redis without BITFIELD (an embedded test server): the counters
		// still show.
		histErr = problem(err)
		if m, err = h.api.JobMetrics(r.Context(), mins, ""); err != nil {
			h.fail(w, r, err)
			return
		}
	}
	d := &jobMetricsData{Minutes: mins, Choice: []int{60, 180, 480}, Metrics: m, Class: class,
		Chart: histogramChart(m.Histogram), Total: api.ClassMetrics{Class: class}, HistogramErr: histErr}
	for _, c := range m.Classes {
		if c.Class == class {
			d.Total = c
		}
	}
	h.render(w, r, "job_metrics_class", "Metrics: "+class, "metrics", d)
}
