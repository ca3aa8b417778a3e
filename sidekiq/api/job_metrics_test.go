package api_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/sidekiq/api"
)

// Keys as Ruby wrote them: Sidekiq 7.3.10 (captured: j|20261121|21:33 and
// HardJob-21-21:33) and 8.x (j|261121|21:34, h|HardJob-21-21:34), plus a
// 8.x 10-minute bucket that must not be counted twice and a minute outside
// the window.
func TestJobMetricsSumsBothKeyLayoutsInTheWindow(t *testing.T) {
	b := apiSetup(t)
	b.do(t, "HSET", "j|20261121|21:33", "HardJob|p", 5, "HardJob|f", 1, "HardJob|ms", 400, "EasyJob|p", 2, "EasyJob|ms", 10)
	b.do(t, "HSET", "j|261121|21:34", "HardJob|p", 3, "HardJob|ms", 2600)
	b.do(t, "HSET", "j|261121|21:3", "HardJob|p", 3, "HardJob|ms", 2600)
	b.do(t, "HSET", "j|20261121|20:33", "HardJob|p", 100)
	b.do(t, "BITFIELD", "HardJob-21-21:33", "INCRBY", "u16", "#0", 4)
	b.do(t, "BITFIELD", "h|HardJob-21-21:34", "INCRBY", "u16", "#0", 1, "INCRBY", "u16", "#25", 2)

	until := time.Date(2026, 11, 21, 21, 40, 30, 0, time.UTC)
	b.clk.Set(until)
	m, err := b.api.JobMetrics(t.Context(), 60, "HardJob")
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 11, 21, 20, 41, 0, 0, time.UTC), m.Since)
	require.Equal(t, []api.ClassMetrics{
		{Class: "HardJob", Processed: 8, Failed: 1, Milliseconds: 3000},
		{Class: "EasyJob", Processed: 2, Milliseconds: 10},
	}, m.Classes)
	want := make([]int64, 26)
	want[0], want[25] = 5, 2
	require.Equal(t, want, m.Histogram)

	_, err = b.api.JobMetrics(t.Context(), 481, "")
	require.ErrorContains(t, err, "between 1 and 480")
}

// gojob's format for all readers writes each run in both layouts: a
// minute's field found in both counts once.
func TestJobMetricsCountsAMinuteWrittenInBothLayoutsOnce(t *testing.T) {
	b := apiSetup(t)
	b.do(t, "HSET", "j|20261121|21:33", "HardJob|p", 5, "HardJob|ms", 400, "RubyOnly|p", 2)
	b.do(t, "HSET", "j|261121|21:33", "HardJob|p", 5, "HardJob|ms", 400)
	b.do(t, "BITFIELD", "HardJob-21-21:33", "INCRBY", "u16", "#3", 5)
	b.do(t, "BITFIELD", "h|HardJob-21-21:33", "INCRBY", "u16", "#3", 5)
	b.clk.Set(time.Date(2026, 11, 21, 21, 40, 30, 0, time.UTC))
	m, err := b.api.JobMetrics(t.Context(), 60, "HardJob")
	require.NoError(t, err)
	require.Equal(t, []api.ClassMetrics{
		{Class: "HardJob", Processed: 5, Milliseconds: 400},
		{Class: "RubyOnly", Processed: 2},
	}, m.Classes)
	want := make([]int64, 26)
	want[3] = 5
	require.Equal(t, want, m.Histogram)
}
