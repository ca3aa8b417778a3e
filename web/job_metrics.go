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
	// Classes are Metrics.Classes as rows.
	Classes []classRow
	Class   string
	Chart   template.HTML
	// Total is Class's row.
	Total classRow
	// HistogramErr says why the histogram could not be read.
	HistogramErr string
}

// classRow is one class's totals with the figures the tab derives.
type classRow struct{ api.ClassMetrics }

// Succeeded is Processed - Failed.
func (c classRow) Succeeded() int64 { return c.Processed - c.Failed }

// AvgMillis is the mean time of a successful run, 0 without one.
func (c classRow) AvgMillis() float64 {
	if s := c.Succeeded(); s > 0 {
		return float64(c.Milliseconds) / float64(s)
	}
	return 0
}

func classRows(cs []api.ClassMetrics) []classRow {
	rows := make([]classRow, len(cs))
	for i, c := range cs {
		rows[i] = classRow{c}
	}
	return rows
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
	h.render(w, r, "job_metrics", "Metrics", "metrics", &jobMetricsData{Minutes: mins, Choice: []int{60, 180, 480}, Metrics: m, Classes: classRows(m.Classes)})
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
		Chart: histogramChart(m.Histogram), Total: classRow{api.ClassMetrics{Class: class}}, HistogramErr: histErr}
	for _, c := range m.Classes {
		if c.Class == class {
			d.Total = classRow{c}
		}
	}
	h.render(w, r, "job_metrics_class", "Metrics: "+class, "metrics", d)
}
