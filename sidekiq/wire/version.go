package wire

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is the Ruby Sidekiq release whose wire format gojob writes: the
// timestamp format, backtrace encoding, heartbeat layout and retry jitter all
// follow it. Pick the oldest Sidekiq that reads the same Redis.
type Version struct {
	Major, Minor, Patch int
}

// The releases gojob knows by name (the reference releases of
// docs/sidekiq-wire.md#sources).
var (
	Version6 = Version{6, 4, 1}
	Version7 = Version{7, 3, 10}
	Version8 = Version{8, 1, 7}
)

// ParseVersion reads "6", "7", "8" (the reference release of that
// major) or a full "x.y.z".
func ParseVersion(s string) (Version, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "6":
		return Version6, nil
	case "7":
		return Version7, nil
	case "8":
		return Version8, nil
	}
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return Version{}, fmt.Errorf("sidekiq: invalid version %q (want 6, 7, 8 or x.y.z)", s)
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 {
			return Version{}, fmt.Errorf("sidekiq: invalid version %q", s)
		}
		n[i] = v
	}
	v := Version{n[0], n[1], n[2]}
	if v.Major < 6 || v.Major > 8 {
		return Version{}, fmt.Errorf("sidekiq: unsupported version %q (6.x, 7.x and 8.x are supported)", s)
	}
	return v, nil
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// AtLeast reports whether v >= major.minor.patch.
func (v Version) AtLeast(major, minor, patch int) bool {
	if v.Major != major {
		return v.Major > major
	}
	if v.Minor != minor {
		return v.Minor > minor
	}
	return v.Patch >= patch
}
