package wire

import "fmt"

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
