package wire

import (
	"fmt"
	"time"

	"github.com/gojob/gojob/internal/fetchedjob"
	"github.com/gojob/gojob/sidekiq/internal/lazyjson"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// lazyDec is rubyjson's lazy reading of a fetched payload.
var lazyDec = lazyjson.Installed[rubyjson.Value, *rubyjson.Map]()

// Job is one Sidekiq job payload. It keeps every field it was given, in
// order, including keys gojob does not know, and re-encodes to the bytes
// Ruby's JSON.generate would write. A Job decoded from Redis also keeps its
// original bytes, which Bytes returns while the job is unchanged: the paths
// that move stored jobs (LREM, ZREM, requeue, retry) name them by those
// bytes.
//
// The zero Job is an empty payload. A Job is not safe for concurrent
// modification.
type Job struct {
	m *rubyjson.Map
	// lz holds a fetched job not decoded yet (fetchedjob.Parse) while lazy
	// is set: reads decode the field they ask for; the first change, or
	// Map, decodes the whole payload into m.
	lz    lazyjson.Object
	raw   []byte
	lazy  bool
	dirty bool
	// class is a lazy job's "class", read once when it was scanned: the
	// processor asks for it several times per job. Valid while lazy is
	// set (the first change decodes the job and clears lazy).
	class string
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

func init() { fetchedjob.Install(parseFetched) }

// parseFetched decodes a fetched payload into j, which it resets
// (fetchedjob.ParseInto): the lazy scan only, fields are decoded when read.
func parseFetched(j *Job, data []byte) error {
	// Field by field: the scan resets lz, the bulk of a Job.
	j.m, j.lazy, j.raw, j.dirty, j.class = nil, false, data, false, ""
	if err := lazyDec.Scan(&j.lz, data); err != nil {
		*j = Job{}
		return fmt.Errorf("sidekiq: parse job: %w", err)
	}
	j.lazy = true
	j.class, _ = lazyDec.String(&j.lz, "class")
	return nil
}

// decoded returns the job's map, decoding a lazy job first (the zero Job's
// is empty).
func (j *Job) decoded() *rubyjson.Map {
	if j.m == nil {
		if j.lazy {
			j.m = lazyDec.Map(&j.lz)
			j.lazy = false
			j.lz = lazyjson.Object{}
		} else {
			j.m = rubyjson.NewMap()
		}
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

// Bytes returns the original bytes when the job is unchanged, otherwise its
// Ruby-exact encoding.
func (j *Job) Bytes() []byte {
	if j.raw != nil && !j.dirty {
		return j.raw
	}
	return j.decoded().Encode()
}

// Clone returns a deep copy that shares nothing with j and has no raw bytes.
func (j *Job) Clone() *Job {
	if j.m == nil && j.lazy {
		m, _ := rubyjson.ParseObject(j.raw) // a copy, not shared
		return &Job{m: m, dirty: true}
	}
	return &Job{m: j.m.Clone(), dirty: true}
}

// Get returns any field.
func (j *Job) Get(key string) (rubyjson.Value, bool) {
	if j.m == nil && j.lazy {
		// An absent key (most lookups on the run path: unique_until,
		// limit…) is answered here: the decoder's (Value, bool) result
		// comes back through memory in a way that stalls the CPU.
		if !j.lz.Has(key) {
			return rubyjson.Value{}, false
		}
		return lazyDec.Get(&j.lz, key)
	}
	return j.m.Get(key)
}

// Has reports whether the payload has key.
func (j *Job) Has(key string) bool {
	if j.m == nil && j.lazy {
		return j.lz.Has(key)
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
	if j.m == nil && j.lazy {
		s, _ := lazyDec.String(&j.lz, key)
		return s
	}
	v, _ := j.m.Get(key)
	s, _ := v.Str()
	return s
}

func (j *Job) setStr(key, s string) { j.Set(key, rubyjson.StringValue(s)) }

// Class returns "class".
func (j *Job) Class() string {
	if j.m == nil && j.lazy {
		return j.class
	}
	return j.str("class")
}

// Args returns "args" (nil when it is missing or not an array).
func (j *Job) Args() []rubyjson.Value {
	v, _ := j.Get("args")
	a, _ := v.Array()
	return a
}

// JID returns "jid". SideJob pushes integer jids; those are returned as their
// decimal text.
func (j *Job) JID() string {
	v, _ := j.Get("jid")
	switch v.Kind() {
	case rubyjson.String:
		s, _ := v.Str()
		return s
	case rubyjson.Integer, rubyjson.Float:
		return string(v.Encode())
	}
	return ""
}

// Queue returns "queue".
func (j *Job) Queue() string { return j.str("queue") }

// SetQueue sets "queue".
func (j *Job) SetQueue(s string) { j.setStr("queue", s) }

// ErrorMessage returns "error_message".
func (j *Job) ErrorMessage() string { return j.str("error_message") }

// ErrorClass returns "error_class".
func (j *Job) ErrorClass() string { return j.str("error_class") }

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

// Time reads a timestamp field (created_at, enqueued_at, failed_at,
// retried_at, discarded_at) by its lexical type: integer = milliseconds,
// fraction or exponent = seconds.
func (j *Job) Time(key string) (time.Time, bool) {
	v, ok := j.Get(key)
	if !ok {
		return time.Time{}, false
	}
	return readTimestamp(v)
}
