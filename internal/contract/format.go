package contract

import (
	"sync/atomic"

	"github.com/gojob/gojob/sidekiq/wire"
)

// FormatForAll is the Format written when nothing shows the readers'
// version (see DecideFormat): beside Version's layout (7.3.10's, readable
// by every version from 6.4.1 to 8.x) the heartbeat writes the running
// jobs under both work-hash keys (`<id>:workers`, read up to 6.4.1, and
// `<id>:work`, read from 6.4.2) and the `concurrency` field of the process
// hash (read by 8.1.2+ Web UIs).
var FormatForAll = Format{Version: wire.Version7, ForAll: true}

// WorkKeys returns the work-hash keys format f writes for identity: the
// version's, or both layouts when ForAll.
func WorkKeys(f Format, identity string) []string {
	if f.ForAll {
		return []string{identity + ":work", identity + ":workers"}
	}
	return []string{WorkKey(identity, f.Version)}
}

// ConcurrencyField reports whether format f writes a `concurrency` field
// beside `info` in the process hash (8.1.2+, or ForAll for 8.1.2+ Web UIs).
func ConcurrencyField(f Format) bool { return f.ForAll || f.Version.AtLeast(8, 1, 2) }

// NewLiveFormat returns a holder of f.
func NewLiveFormat(f Format) *LiveFormat {
	l := new(LiveFormat)
	l.Set(f)
	return l
}

// FixedFormat returns a holder of v's format that nothing changes.
func FixedFormat(v wire.Version) *LiveFormat { return NewLiveFormat(Format{Version: v}) }

// Format is what a process writes: the layout of one Sidekiq version and,
// with ForAll, what the readers of the other versions look for as well.
//
// ForAll is for a Redis where nothing shows which Sidekiq reads it
// (docs/version-follow.md): beside Version's layout (7.3.10's, readable by
// every version from 6.4.1 to 8.x) the heartbeat writes the running jobs
// under both work-hash keys (`<id>:workers`, read up to 6.4.1, and
// `<id>:work`, read from 6.4.2) and the `concurrency` field of the process
// hash (read by 8.1.2+ Web UIs).
type Format struct {
	Version wire.Version
	ForAll  bool
}

// String is the version, with " for all readers" when ForAll.
func (f Format) String() string {
	if f.ForAll {
		return f.Version.String() + " for all readers"
	}
	return f.Version.String()
}

// LiveFormat holds the Format a running process writes, which may change
// while it runs when the process follows the cluster's version. Readers load
// it at each write, so a change applies to the next one. The zero value
// holds DefaultVersion's format. Safe for concurrent use.
type LiveFormat struct {
	p atomic.Pointer[Format]
}

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
func (l *LiveFormat) Version() wire.Version { return l.Format().Version }

// Set makes f the format written from now on and reports whether it
// changed.
func (l *LiveFormat) Set(f Format) bool {
	old := l.p.Swap(&f)
	return old == nil || *old != f
}
