package web

import (
	"fmt"
	"html/template"
	"strings"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/numfmt"
	"github.com/gojob/gojob/sidekiq/api"
)

// Charts are inline SVG drawn on the server: no script, no library, and
// they print and screenshot as they show.

const (
	chartW, chartH = 900, 240
	padL, padR     = 56, 16
	padT, padB     = 16, 36
)

// historyChart draws processed and failed per day, oldest day on the left.
func historyChart(days []api.DayStats) template.HTML {
	n := len(days)
	if n == 0 {
		return ""
	}
	var maxV int64 = 1
	for _, d := range days {
		maxV = max(maxV, d.Processed, d.Failed)
	}
	maxV = niceCeil(maxV)
	plotW, plotH := float64(chartW-padL-padR), float64(chartH-padT-padB)
	x := func(i int) float64 { // i counts from the oldest day
		if n == 1 {
			return padL + plotW/2
		}
		return padL + plotW*float64(i)/float64(n-1)
	}
	y := func(v int64) float64 { return padT + plotH*(1-float64(v)/float64(maxV)) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="Processed and failed jobs per day, last %d days" xmlns="http://www.w3.org/2000/svg">`, chartW, chartH, n)
	for k := 0; k <= 4; k++ {
		v := maxV * int64(k) / 4
		fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, padL, chartW-padR, y(v), y(v))
		fmt.Fprintf(&b, `<text class="axis" x="%d" y="%.1f" text-anchor="end">%s</text>`, padL-6, y(v)+4, shortNum(v))
	}
	step := max(1, n/7)
	for i := 0; i < n; i += step {
		d := days[n-1-i]
		fmt.Fprintf(&b, `<text class="axis" x="%.1f" y="%d" text-anchor="middle">%s</text>`, x(i), chartH-padB+18, template.HTMLEscapeString(d.Date[5:]))
	}
	series := func(class string, val func(api.DayStats) int64) {
		var pts strings.Builder
		for i := range n {
			fmt.Fprintf(&pts, "%.1f,%.1f ", x(i), y(val(days[n-1-i])))
		}
		fmt.Fprintf(&b, `<polygon class="area %s" points="%.1f,%.1f %s%.1f,%.1f"/>`, class, x(0), y(0), pts.String(), x(n-1), y(0))
		fmt.Fprintf(&b, `<polyline class="line %s" points="%s"/>`, class, strings.TrimSpace(pts.String()))
		for i := range n {
			d := days[n-1-i]
			fmt.Fprintf(&b, `<circle class="dot %s" cx="%.1f" cy="%.1f" r="3"><title>%s: %s %s</title></circle>`,
				class, x(i), y(val(d)), d.Date, numfmt.Int(val(d)), class)
		}
	}
	series("processed", func(d api.DayStats) int64 { return d.Processed })
	series("failed", func(d api.DayStats) int64 { return d.Failed })
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// histogramChart draws the execution-time histogram: one bar per bucket
// of contract.HistogramLimits.
func histogramChart(counts []int64) template.HTML {
	if len(counts) == 0 {
		return ""
	}
	var maxV int64 = 1
	for _, c := range counts {
		maxV = max(maxV, c)
	}
	maxV = niceCeil(maxV)
	plotW, plotH := float64(chartW-padL-padR), float64(chartH-padT-padB)
	bw := plotW / float64(len(counts))
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="Execution time histogram" xmlns="http://www.w3.org/2000/svg">`, chartW, chartH)
	for k := 0; k <= 4; k++ {
		v := maxV * int64(k) / 4
		yy := padT + plotH*(1-float64(v)/float64(maxV))
		fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, padL, chartW-padR, yy, yy)
		fmt.Fprintf(&b, `<text class="axis" x="%d" y="%.1f" text-anchor="end">%s</text>`, padL-6, yy+4, shortNum(v))
	}
	for i, c := range counts {
		h := plotH * float64(c) / float64(maxV)
		x := padL + bw*float64(i)
		fmt.Fprintf(&b, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s: %s jobs</title></rect>`,
			x+2, padT+plotH-h, bw-4, h, bucketLabel(i), numfmt.Int(c))
		if i%3 == 0 {
			fmt.Fprintf(&b, `<text class="axis" x="%.1f" y="%d" text-anchor="middle">%s</text>`, x+bw/2, chartH-padB+18, bucketLabel(i))
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// bucketLabel names histogram bucket i by its upper limit: "<20ms",
// "<1.1s", "≥335s".
func bucketLabel(i int) string {
	if i >= len(contract.HistogramLimits) {
		return "≥" + msLabel(contract.HistogramLimits[len(contract.HistogramLimits)-1])
	}
	return "<" + msLabel(contract.HistogramLimits[i])
}

func msLabel(ms int64) string {
	if ms < 1000 {
		return fmt.Sprintf("%dms", ms)
	}
	s := fmt.Sprintf("%.2f", float64(ms)/1000)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s + "s"
}

// niceCeil rounds v up to 1, 2, 4, 5 or 8 times a power of ten, at least 4 so
// that the four grid steps are whole numbers.
func niceCeil(v int64) int64 {
	v = max(v, 4)
	p := int64(1)
	for {
		for _, m := range []int64{1, 2, 4, 5, 8} {
			if n := m * p; n >= v && n%4 == 0 {
				return n
			}
		}
		p *= 10
	}
}

// shortNum is 950, 1.2k, 3.4M.
func shortNum(v int64) string {
	switch {
	case v < 1000:
		return fmt.Sprint(v)
	case v < 1_000_000:
		return strings.Replace(fmt.Sprintf("%.1fk", float64(v)/1e3), ".0k", "k", 1)
	default:
		return strings.Replace(fmt.Sprintf("%.1fM", float64(v)/1e6), ".0M", "M", 1)
	}
}
