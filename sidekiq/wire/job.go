package wire

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// Job is one Sidekiq job payload. It keeps every field it was given, in
// order, including keys gojob does not know, and re-encodes to the bytes
// Ruby's JSON.generate would write. A Job decoded from Redis also keeps its
// original bytes (Raw), which the paths that move stored jobs (LREM, ZREM,
// requeue, retry) use unchanged.
//
// A Job is not safe for concurrent modification.
type Job struct {
	m *rubyjson.Map
	// lazy is a fetched job not decoded yet (ParseFetchedJob), in lz:
	// reads decode the field they ask for; the first change, or Map,
	// decodes the whole payload into m.
	lazy  *rubyjson.Lazy
	lz    rubyjson.Lazy
	raw   []byte
	dirty bool
}

// ParseJob decodes a payload. The error is a *rubyjson.SyntaxError for bad
// JSON, or a plain error when the JSON is not an object.
func ParseJob(data []byte) (*Job, error) {
	m, err := rubyjson.ParseObject(data)
	if err != nil {
		return nil, fmt.Errorf("sidekiq: parse job: %w", err)
	}
	return &Job{m: m, raw: data}, nil
}

// ParseFetchedJob is ParseJob for a payload the caller owns and never
// modifies again (a fetched job's bytes, kept for its acknowledgement): the
// job's strings share data's memory instead of a copy of it. The payload
// is checked as ParseJob checks it, but its fields are decoded only when
// they are read: a job that runs and succeeds is read a few times and
// never re-encoded.
func ParseFetchedJob(data []byte) (*Job, error) {
	j := &Job{raw: data}
	if err := j.lz.Scan(data); err != nil {
		return nil, fmt.Errorf("sidekiq: parse job: %w", err)
	}
	j.lazy = &j.lz
	return j, nil
}

// decoded returns the job's map, decoding a lazy job first.
func (j *Job) decoded() *rubyjson.Map {
	if j.m == nil && j.lazy != nil {
		j.m = j.lazy.Map()
		j.lazy = nil
		j.lz = rubyjson.Lazy{}
	}
	return j.m
}

// NewJob builds a job of class with args, in the key order of Ruby's
// Client.push("class" => ..., "args" => ...). Args are converted with
// rubyjson.FromGo; use rubyjson values for exact control. It returns an error
// for args that have no JSON form.
func NewJob(class string, args ...any) (*Job, error) {
	vals := make([]rubyjson.Value, len(args))
	for i, a := range args {
		v, err := rubyjson.FromGo(a)
		if err != nil {
			return nil, fmt.Errorf("sidekiq: job %s arg %d: %w", class, i, err)
		}
		vals[i] = v
	}
	m := rubyjson.NewMap()
	m.Set("class", rubyjson.StringValue(class))
	m.Set("args", rubyjson.ArrayValue(vals...))
	return &Job{m: m, dirty: true}, nil
}

// JobFromMap wraps an ordered object as a Job (not copied).
func JobFromMap(m *rubyjson.Map) *Job { return &Job{m: m, dirty: true} }

// Map returns the payload's ordered object for direct reading and editing.
// Calling it marks the job as changed, so Bytes re-encodes.
func (j *Job) Map() *rubyjson.Map {
	j.dirty = true
	return j.decoded()
}

// Raw returns the bytes the job was decoded from, or nil for a job built in
// Go. They must not be modified: a fetched job's strings share them, and its
// acknowledgement names the job by them.
func (j *Job) Raw() []byte { return j.raw }

// Bytes returns the original bytes when the job is unchanged, otherwise its
// Ruby-exact encoding.
func (j *Job) Bytes() []byte {
	if j.raw != nil && !j.dirty {
		return j.raw
	}
	return j.decoded().Encode()
}

// Encode returns the Ruby-exact encoding of the current payload.
func (j *Job) Encode() []byte { return j.decoded().Encode() }

// Clone returns a deep copy that shares nothing with j and has no raw bytes.
func (j *Job) Clone() *Job {
	if j.m == nil && j.lazy != nil {
		m, _ := rubyjson.ParseObject(j.raw) // a copy, not shared
		return &Job{m: m, dirty: true}
	}
	return &Job{m: j.m.Clone(), dirty: true}
}

// Get returns any field.
func (j *Job) Get(key string) (rubyjson.Value, bool) {
	if j.m == nil && j.lazy != nil {
		return j.lazy.Get(key)
	}
	return j.m.Get(key)
}

// Has reports whether the payload has key.
func (j *Job) Has(key string) bool {
	if j.m == nil && j.lazy != nil {
		return j.lazy.Has(key)
	}
	return j.m.Has(key)
}

// Set sets any field, keeping its position when it exists.
func (j *Job) Set(key string, v rubyjson.Value) {
	j.dirty = true
	j.decoded().Set(key, v)
}

// Delete removes a field.
func (j *Job) Delete(key string) {
	if j.decoded().Delete(key) {
		j.dirty = true
	}
}

func (j *Job) str(key string) string {
	if j.m == nil && j.lazy != nil {
		s, _ := j.lazy.String(key)
		return s
	}
	v, _ := j.m.Get(key)
	s, _ := v.Str()
	return s
}

func (j *Job) setStr(key, s string) { j.Set(key, rubyjson.StringValue(s)) }

// Class returns "class".
func (j *Job) Class() string { return j.str("class") }

// SetClass sets "class".
func (j *Job) SetClass(s string) { j.setStr("class", s) }

// Args returns "args" (nil when it is missing or not an array).
func (j *Job) Args() []rubyjson.Value {
	v, _ := j.Get("args")
	a, _ := v.Array()
	return a
}

// SetArgs sets "args".
func (j *Job) SetArgs(args ...rubyjson.Value) { j.Set("args", rubyjson.ArrayValue(args...)) }

// JID returns "jid". SideJob pushes integer jids; those are returned as their
// decimal text.
func (j *Job) JID() string {
	v, _ := j.Get("jid")
	if s, ok := v.Str(); ok {
		return s
	}
	return v.NumberText()
}

// SetJID sets "jid".
func (j *Job) SetJID(s string) { j.setStr("jid", s) }

// Queue returns "queue".
func (j *Job) Queue() string { return j.str("queue") }

// SetQueue sets "queue".
func (j *Job) SetQueue(s string) { j.setStr("queue", s) }

// RetryQueue returns "retry_queue".
func (j *Job) RetryQueue() string { return j.str("retry_queue") }

// Wrapped returns "wrapped" (the ActiveJob class).
func (j *Job) Wrapped() string { return j.str("wrapped") }

// BID returns "bid" (the Sidekiq Pro batch id).
func (j *Job) BID() string { return j.str("bid") }

// ErrorMessage returns "error_message".
func (j *Job) ErrorMessage() string { return j.str("error_message") }

// ErrorClass returns "error_class".
func (j *Job) ErrorClass() string { return j.str("error_class") }

// DisplayClass returns "display_class".
func (j *Job) DisplayClass() string { return j.str("display_class") }

// Tags returns "tags".
func (j *Job) Tags() []string {
	v, _ := j.Get("tags")
	a, _ := v.Array()
	out := make([]string, 0, len(a))
	for _, e := range a {
		if s, ok := e.Str(); ok {
			out = append(out, s)
		}
	}
	return out
}

// RetrySetting is the "retry" field as Sidekiq reads it.
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

// Max returns the number of retries allowed: the explicit count, or
// defaultMax for true and any other truthy value.
func (r RetrySetting) Max(defaultMax int) int {
	if r.HasCount {
		return r.Count
	}
	return defaultMax
}

// Retry reads "retry": true, false, an integer count, absent, or any other
// value (truthy, meaning the default count).
func (j *Job) Retry() RetrySetting {
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

// SetRetry sets "retry" to true/false (bool) or a count (int).
func (j *Job) SetRetry(v any) error {
	switch t := v.(type) {
	case bool:
		j.Set("retry", rubyjson.BoolValue(t))
	case int:
		j.Set("retry", rubyjson.IntValue(int64(t)))
	default:
		return fmt.Errorf("sidekiq: retry must be a bool or an int, got %T", v)
	}
	return nil
}

// RetryFor returns "retry_for" in seconds (7.1.3+) and whether it is set.
func (j *Job) RetryFor() (time.Duration, bool) {
	v, ok := j.Get("retry_for")
	if !ok || v.IsNull() {
		return 0, false
	}
	f, ok := v.Float()
	if !ok {
		return 0, false
	}
	return time.Duration(int64(f)) * time.Second, true
}

// Backtrace reads "backtrace": all reports true for `true`, limit > 0 for an
// integer N (the first N lines). Both are zero when backtraces are off.
func (j *Job) Backtrace() (all bool, limit int) {
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

// Dead reports whether an exhausted job goes to the dead set: false only
// when the payload has "dead": false.
func (j *Job) Dead() bool {
	v, ok := j.Get("dead")
	if !ok {
		return true
	}
	b, isBool := v.Bool()
	return !(isBool && !b)
}

// RetryCount returns "retry_count" (which may be -1 after a manual retry)
// and whether it is present.
func (j *Job) RetryCount() (int, bool) {
	v, ok := j.Get("retry_count")
	if !ok {
		return 0, false
	}
	n, ok := v.Int()
	return int(n), ok
}

// SetRetryCount sets "retry_count".
func (j *Job) SetRetryCount(n int) { j.Set("retry_count", rubyjson.IntValue(int64(n))) }

// Time reads a timestamp field (created_at, enqueued_at, failed_at,
// retried_at, discarded_at) by its lexical type: integer = milliseconds,
// fraction or exponent = seconds.
func (j *Job) Time(key string) (time.Time, bool) {
	v, ok := j.Get(key)
	if !ok {
		return time.Time{}, false
	}
	return ReadTimestamp(v)
}

// SetTime writes a timestamp field in the format of version v.
func (j *Job) SetTime(key string, t time.Time, v Version) { j.Set(key, TimestampValue(t, v)) }

// CreatedAt returns "created_at".
func (j *Job) CreatedAt() (time.Time, bool) { return j.Time("created_at") }

// EnqueuedAt returns "enqueued_at".
func (j *Job) EnqueuedAt() (time.Time, bool) { return j.Time("enqueued_at") }

// FailedAt returns "failed_at".
func (j *Job) FailedAt() (time.Time, bool) { return j.Time("failed_at") }

// RetriedAt returns "retried_at".
func (j *Job) RetriedAt() (time.Time, bool) { return j.Time("retried_at") }

// Latency returns how long the job has waited: now - (enqueued_at ||
// created_at), or 0 when neither is set (Sidekiq's calculate_latency).
func (j *Job) Latency(now time.Time) time.Duration {
	t, ok := j.EnqueuedAt()
	if !ok {
		if t, ok = j.CreatedAt(); !ok {
			return 0
		}
	}
	return now.Sub(t)
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

// MergeDefaults is Ruby's defaults.merge(item) applied to the payload: the
// keys of defaults come first, in their order, with the payload's values
// where it has them; the payload's other keys follow in their order.
// Client.Push normalizes with it (retry and queue first).
func (j *Job) MergeDefaults(defaults *rubyjson.Map) {
	j.m = j.decoded().MergeFront(defaults)
	j.dirty = true
}

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
func (j *Job) IsActiveJob() bool { return IsActiveJobWrapper(j.Class()) }

// ActiveJobClass returns the class ActiveJob runs for a wrapper job:
// args[0]["job_class"], else "wrapped". It returns "" for other jobs.
func (j *Job) ActiveJobClass() string {
	if !j.IsActiveJob() {
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
	return j.Wrapped()
}

// IsZero reports whether j is nil or a zero Job that holds no payload.
func (j *Job) IsZero() bool { return j == nil || (j.m == nil && j.lazy == nil) }
