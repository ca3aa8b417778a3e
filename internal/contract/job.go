package contract

import (
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// RetryQueue returns the job's "retry_queue".
func RetryQueue(j *wire.Job) string { return str(j, "retry_queue") }

// RetrySetting is the "retry" field as Sidekiq reads it: the number of
// retries allowed is Count when HasCount, else the configured default.
type RetrySetting struct {
	// Present is false when the payload has no "retry" key.
	Present bool
	// Enabled is Ruby truthiness: false only for false and null.
	Enabled bool
	// Count is the explicit number of retries when the value is an integer.
	Count int
	// HasCount is true when the value is an integer (0 included).
	HasCount bool
}

// Retry reads the job's "retry": true, false, an integer count, absent, or
// any other value (truthy, meaning the default count).
func Retry(j *wire.Job) RetrySetting {
	v, ok := j.Get("retry")
	if !ok {
		return RetrySetting{}
	}
	r := RetrySetting{Present: true, Enabled: v.Truthy()}
	if v.Kind() == rubyjson.Integer {
		if n, ok := v.Int(); ok {
			r.Count, r.HasCount = int(n), true
		}
	}
	return r
}

// RetryMax returns the number of retries r allows: the explicit count, or
// defaultMax for true and any other truthy value.
func RetryMax(r RetrySetting, defaultMax int) int {
	if r.HasCount {
		return r.Count
	}
	return defaultMax
}

// RetryFor returns the job's "retry_for" in seconds (7.1.3+) and whether
// it is set.
func RetryFor(j *wire.Job) (time.Duration, bool) {
	v, ok := j.Get("retry_for")
	if !ok || v.Kind() == rubyjson.Null {
		return 0, false
	}
	f, ok := v.Float()
	if !ok {
		return 0, false
	}
	return time.Duration(int64(f)) * time.Second, true
}

// Backtrace reads the job's "backtrace": all reports true for `true`,
// limit > 0 for an integer N (the first N lines). Both are zero when
// backtraces are off.
func Backtrace(j *wire.Job) (all bool, limit int) {
	v, ok := j.Get("backtrace")
	if !ok || !v.Truthy() {
		return false, 0
	}
	if v.Kind() == rubyjson.Integer {
		n, _ := v.Int()
		return false, int(n)
	}
	return true, 0
}

// Dead reports whether the job goes to the dead set once its retries are
// exhausted: false only when the payload has "dead": false.
func Dead(j *wire.Job) bool {
	v, ok := j.Get("dead")
	if !ok {
		return true
	}
	b, isBool := v.Bool()
	return !(isBool && !b)
}

// SetRetryCount sets the job's "retry_count".
func SetRetryCount(j *wire.Job, n int) { j.Set("retry_count", rubyjson.IntValue(int64(n))) }

// The ActiveJob wrapper class names (docs/sidekiq-wire.md#activejob-payloads):
// Rails' adapter class up to Sidekiq 7.x, Sidekiq's own from 8.0.
const (
	ActiveJobWrapper  = "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper"
	ActiveJobWrapper8 = "Sidekiq::ActiveJob::Wrapper"
)

// IsActiveJobWrapper reports whether class is one of the ActiveJob wrapper
// class names.
func IsActiveJobWrapper(class string) bool {
	return class == ActiveJobWrapper || class == ActiveJobWrapper8
}

// IsActiveJob reports whether the job's class is an ActiveJob wrapper.
func IsActiveJob(j *wire.Job) bool { return IsActiveJobWrapper(j.Class()) }

// ActiveJobClass returns the class ActiveJob runs for a wrapper job:
// args[0]["job_class"], else "wrapped". It returns "" for other jobs.
func ActiveJobClass(j *wire.Job) string {
	if !IsActiveJob(j) {
		return ""
	}
	if a := j.Args(); len(a) > 0 {
		if m, ok := a[0].Map(); ok {
			v, _ := m.Get("job_class")
			if s, _ := v.Str(); s != "" {
				return s
			}
		}
	}
	return Wrapped(j)
}

// ActiveJobID returns the ActiveJob's args[0]["job_id"] of a wrapper
// job, the ID Rails logs. It returns "" for other jobs and for nil.
func ActiveJobID(j *wire.Job) string {
	if j == nil || !IsActiveJob(j) {
		return ""
	}
	if a := j.Args(); len(a) > 0 {
		if m, ok := a[0].Map(); ok {
			v, _ := m.Get("job_id")
			s, _ := v.Str()
			return s
		}
	}
	return ""
}

// Wrapped returns the job's "wrapped" (the ActiveJob class).
func Wrapped(j *wire.Job) string { return str(j, "wrapped") }

// Tags returns the job's "tags" (its string elements).
func Tags(j *wire.Job) []string {
	v, _ := j.Get("tags")
	return StringElems(v)
}

// StringElems returns the string elements of an array (none when v is not
// one); the other elements are left out.
func StringElems(v rubyjson.Value) []string {
	a, _ := v.Array()
	out := make([]string, 0, len(a))
	for _, e := range a {
		if s, ok := e.Str(); ok {
			out = append(out, s)
		}
	}
	return out
}

// MergeDefaults is Ruby's defaults.merge(item) applied to the job in place:
// the defaults' keys first, with the job's values where it has them, then
// the job's other keys in order.
func MergeDefaults(j *wire.Job, defaults *rubyjson.Map) {
	m := j.Map()
	out := rubyjson.NewMap()
	for i := range defaults.Len() {
		out.Set(defaults.At(i))
	}
	for i := range m.Len() {
		out.Set(m.At(i))
	}
	*m = *out
}

func str(j *wire.Job, key string) string {
	v, _ := j.Get(key)
	s, _ := v.Str()
	return s
}

// NewJID returns a Sidekiq jid: 24 lowercase hex characters
// (SecureRandom.hex(12)).
func NewJID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("sidekiq: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}
