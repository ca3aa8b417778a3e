package contract

import (
	"strconv"
	"time"

	"github.com/gojob/gojob/sidekiq/wire"
)

// Job metrics keys of Sidekiq 7.0+ (docs/sidekiq-wire.md#metrics; Ruby's
// lib/sidekiq/metrics/tracking.rb and shared.rb). Buckets are UTC.

// Metrics TTLs in seconds (tracking.rb SHORT_TERM, MID_TERM; shared.rb
// HISTOGRAM_TTL).
const (
	MetricsShortTTL = 8 * 60 * 60      // j|<minute> and the histograms
	MetricsMidTTL   = 3 * 24 * 60 * 60 // 8.0+ j|<10 minutes>
)

// HistogramLimits are the exclusive upper limits in ms of the first 25
// execution-time histogram buckets (Ruby's lib/sidekiq/metrics/shared.rb
// BUCKET_INTERVALS, 7.0+); the 26th bucket takes the rest.
var HistogramLimits = [...]int64{
	20, 30, 45, 65, 100,
	150, 225, 335, 500, 750,
	1100, 1700, 2500, 3800, 5750,
	8500, 13000, 20000, 30000, 45000,
	65000, 100000, 150000, 225000, 335000,
}

// HistogramBuckets is the number of u16 counters in a histogram key.
const HistogramBuckets = len(HistogramLimits) + 1

// MetricsKeys returns the j|… hash keys a flush at now writes, in Ruby's
// order, with their TTLs.
func MetricsKeys(v wire.Version, now time.Time) (keys []string, ttls []int) {
	now = now.UTC()
	if !v.AtLeast(8, 0, 0) {
		// %Y%m%d|%-H:%-M
		return []string{metricsMinuteKey(now, "20060102", false)}, []int{MetricsShortTTL}
	}
	// %y%m%d|%-H:%M; the 10-minute bucket drops the last character.
	minute := metricsMinuteKey(now, "060102", true)
	return []string{minute[:len(minute)-1], minute}, []int{MetricsMidTTL, MetricsShortTTL}
}

// metricsMinuteKey is the key of now's minute, j|DATE|H:M: the date in
// dateLayout, the hour without padding, the minute padded to two digits
// or not.
func metricsMinuteKey(now time.Time, dateLayout string, padMinute bool) string {
	b := make([]byte, 0, 24)
	b = append(b, "j|"...)
	b = now.AppendFormat(b, dateLayout)
	b = append(b, '|')
	b = strconv.AppendInt(b, int64(now.Hour()), 10)
	b = append(b, ':')
	if padMinute {
		return string(now.AppendFormat(b, "04"))
	}
	return string(strconv.AppendInt(b, int64(now.Minute()), 10))
}

// HistogramKey is the BITFIELD key of class for a flush at now: 7.x
// `<Class>-%d-%H:%-M`, 8.0+ `h|<Class>-%-d-%-H:%-M`.
func HistogramKey(v wire.Version, class string, now time.Time) string {
	now = now.UTC()
	b := make([]byte, 0, len(class)+16)
	if v.AtLeast(8, 0, 0) {
		b = append(b, "h|"...)
		b = append(b, class...)
		b = append(b, '-')
		b = strconv.AppendInt(b, int64(now.Day()), 10)
		b = append(b, '-')
		b = strconv.AppendInt(b, int64(now.Hour()), 10)
	} else {
		b = append(b, class...)
		b = now.AppendFormat(b, "-02-15")
	}
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(now.Minute()), 10)
	return string(b)
}

// MetricsVersions returns the versions whose metrics keys format f writes,
// in the order a flush writes them: none before 7.0, the version's own, or
// for all readers both 7.x's (read by 7.x Web UIs) and 8.x's (read by 8.x
// Web UIs, which no longer read 7.x's keys).
func MetricsVersions(f Format) []wire.Version {
	switch {
	case f.ForAll:
		return []wire.Version{wire.Version7, wire.Version8}
	case f.Version.AtLeast(7, 0, 0):
		return []wire.Version{f.Version}
	}
	return nil
}
