package contract

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gojob/gojob/sidekiq/wire"
)

// DefaultVersion is the target when none is configured: Debian's 6.4.1.
var DefaultVersion = wire.Version6

// Breaks reports whether what v writes breaks a reader of version r: 8.x
// millisecond timestamps are seconds to 6.x and 7.x (far-future dates,
// negative latencies, a Busy page that fails; docs/sidekiq-wire.md#timestamps).
// Other differences only hide data from older readers.
func Breaks(v, r wire.Version) bool {
	return MillisecondTimestamps(v) && !MillisecondTimestamps(r)
}

// MillisecondTimestamps reports whether v writes job timestamps as integer
// milliseconds (8.0+) rather than float seconds.
func MillisecondTimestamps(v wire.Version) bool { return v.AtLeast(8, 0, 0) }

// StrictBase64Backtrace reports whether v writes error_backtrace as strict
// base64 (7.2.1+) rather than MIME base64 with line breaks.
func StrictBase64Backtrace(v wire.Version) bool { return v.AtLeast(7, 2, 1) }

// WorkKeySuffix returns the suffix of v's busy-jobs hash: "workers" up to
// 6.4.1, "work" from 6.4.2.
func WorkKeySuffix(v wire.Version) string {
	if v.AtLeast(6, 4, 2) {
		return "work"
	}
	return "workers"
}

// BulkBatchSize is how many jobs push_bulk sends per round trip (1000; 6.4
// sends all in one pipeline, gojob still batches by 1000).
func BulkBatchSize(wire.Version) int { return 1000 }

// ParseVersion reads "6", "7", "8" (the reference release of that
// major) or a full "x.y.z".
func ParseVersion(s string) (wire.Version, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "6":
		return wire.Version6, nil
	case "7":
		return wire.Version7, nil
	case "8":
		return wire.Version8, nil
	}
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return wire.Version{}, fmt.Errorf("sidekiq: invalid version %q (want 6, 7, 8 or x.y.z)", s)
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 {
			return wire.Version{}, fmt.Errorf("sidekiq: invalid version %q", s)
		}
		n[i] = v
	}
	v := wire.Version{Major: n[0], Minor: n[1], Patch: n[2]}
	if v.Major < 6 || v.Major > 8 {
		return wire.Version{}, fmt.Errorf("sidekiq: unsupported version %q (6.x, 7.x and 8.x are supported)", s)
	}
	return v, nil
}
