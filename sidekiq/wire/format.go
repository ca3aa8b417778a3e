package wire

import (
	"sync/atomic"
)

// Format is what a process writes: the layout of one Sidekiq version and,
// with ForAll, what the readers of the other versions look for as well.
//
// ForAll is for a Redis where nothing shows which Sidekiq reads it (see
// DecideFormat): beside Version's layout (7.3.10's, readable by every
// version from 6.4.1 to 8.x) the heartbeat writes the running jobs under
// both work-hash keys (`<id>:workers`, read up to 6.4.1, and `<id>:work`,
// read from 6.4.2) and the `concurrency` field of the process hash (read by
// 8.1.2+ Web UIs).
type Format struct {
	Version Version
	ForAll  bool
}

// FormatForAll is the Format written when nothing shows the readers' version.
var FormatForAll = Format{Version: Version7, ForAll: true}

// String is the version, with " for all readers" when ForAll.
func (f Format) String() string {
	if f.ForAll {
		return f.Version.String() + " for all readers"
	}
	return f.Version.String()
}

// WorkKeys returns the work-hash keys the format writes for identity: the
// version's, or both layouts when ForAll.
func (f Format) WorkKeys(identity string) []string {
	if f.ForAll {
		return []string{identity + ":work", identity + ":workers"}
	}
	return []string{WorkKey(identity, f.Version)}
}

// ConcurrencyField reports whether the process hash carries a `concurrency`
// field beside `info` (8.1.2+, or ForAll for 8.1.2+ Web UIs).
func (f Format) ConcurrencyField() bool { return f.ForAll || f.Version.AtLeast(8, 1, 2) }

// LiveFormat holds the Format a running process writes, which may change
// while it runs when the process follows the cluster's version. Readers load
// it at each write, so a change applies to the next one. Safe for concurrent
// use.
type LiveFormat struct {
	p atomic.Pointer[Format]
}

// NewLiveFormat returns a holder of f.
func NewLiveFormat(f Format) *LiveFormat {
	l := &LiveFormat{}
	l.Set(f)
	return l
}

// FixedFormat returns a holder of v's format that nothing changes.
func FixedFormat(v Version) *LiveFormat { return NewLiveFormat(Format{Version: v}) }

// Format returns the format written now; a nil holder holds DefaultVersion's.
func (l *LiveFormat) Format() Format {
	if l == nil {
		return Format{Version: DefaultVersion}
	}
	if f := l.p.Load(); f != nil {
		return *f
	}
	return Format{Version: DefaultVersion}
}

// Version returns the version whose layout is written now.
func (l *LiveFormat) Version() Version { return l.Format().Version }

// Set makes f the format written from now on and reports whether it
// changed.
func (l *LiveFormat) Set(f Format) bool {
	old := l.p.Swap(&f)
	return old == nil || *old != f
}
