package activejob

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// ErrNotActiveJob is returned by Decode for a job whose class is not
// an ActiveJob wrapper.
var ErrNotActiveJob = errors.New("activejob: not an ActiveJob payload")

// wrapperFor returns the wrapper class name Sidekiq v writes
// (docs/sidekiq-wire.md#activejob-payloads): contract.ActiveJobWrapper up to
// 7.x, contract.ActiveJobWrapper8 from 8.0 (which 6.x and ≤7.3.2 cannot run).
func wrapperFor(v wire.Version) string {
	if v.AtLeast(8, 0, 0) {
		return contract.ActiveJobWrapper8
	}
	return contract.ActiveJobWrapper
}

// Job is the ActiveJob inside a wrapper job: the fields of args[0]
// (ActiveJob::Core#serialize) with the arguments decoded.
type Job struct {
	// Wrapper is the Sidekiq "class" (one of the wrapper names).
	Wrapper string
	// Wrapped is the Sidekiq "wrapped" field ("" when absent).
	Wrapped string
	// JobClass is "job_class", the class Ruby runs; "wrapped" when
	// job_class is missing.
	JobClass string
	// JobID is "job_id", the ActiveJob UUID.
	JobID string
	// ProviderJobID is the Sidekiq jid, as the wrapper sets it before running
	// the job (job_data.merge("provider_job_id" => jid)). The stored value,
	// null at enqueue, stays in Data.
	ProviderJobID string
	// QueueName is "queue_name".
	QueueName string
	// Priority is "priority", nil for null.
	Priority *int
	// Executions is "executions", the ActiveJob-level attempt count.
	Executions int
	// ExceptionExecutions is "exception_executions" (retry_on counters).
	ExceptionExecutions map[string]int
	// Locale is "locale".
	Locale string
	// Timezone is "timezone" ("" for null).
	Timezone string
	// EnqueuedAt is "enqueued_at" (whole seconds from Rails ≤7.0,
	// nanoseconds from 7.1+); zero when missing or unparsable.
	EnqueuedAt time.Time
	// ScheduledAt is "scheduled_at" (Rails 7.1+); zero when null or missing.
	ScheduledAt time.Time
	// Arguments are "arguments" decoded as ActiveJob::Arguments.deserialize reads them.
	Arguments []any
	// Data is a copy of the whole serialized hash, unknown keys included.
	Data *rubyjson.Map
}

// Decode decodes the ActiveJob in an ActiveJob wrapper job. It returns
// ErrNotActiveJob for other jobs, and an error when args is not exactly one
// object or an argument is malformed.
func Decode(j *wire.Job) (*Job, error) {
	if !contract.IsActiveJob(j) {
		return nil, fmt.Errorf("%w: class %q", ErrNotActiveJob, j.Class())
	}
	args := j.Args()
	if len(args) != 1 {
		return nil, fmt.Errorf("activejob: %s: args must hold exactly one hash, got %d values", j.JID(), len(args))
	}
	data, ok := args[0].Map()
	if !ok {
		return nil, fmt.Errorf("activejob: %s: args[0] is a %s, not a hash", j.JID(), args[0].Kind())
	}
	str := func(key string) string {
		v, _ := data.Get(key)
		s, _ := v.Str()
		return s
	}
	aj := &Job{
		Wrapper:       j.Class(),
		Wrapped:       contract.Wrapped(j),
		JobClass:      str("job_class"),
		JobID:         str("job_id"),
		ProviderJobID: j.JID(),
		QueueName:     str("queue_name"),
		Locale:        str("locale"),
		Timezone:      str("timezone"),
		Data:          data.Clone(),
	}
	if aj.JobClass == "" {
		aj.JobClass = aj.Wrapped
	}
	if v, _ := data.Get("priority"); v.Kind() == rubyjson.Integer {
		if n, ok := v.Int(); ok {
			p := int(n)
			aj.Priority = &p
		}
	}
	if v, _ := data.Get("executions"); v.Kind() == rubyjson.Integer || v.Kind() == rubyjson.Float {
		n, _ := v.Int()
		aj.Executions = int(n)
	}
	if v, _ := data.Get("exception_executions"); v.Kind() == rubyjson.Object {
		m, _ := v.Map()
		aj.ExceptionExecutions = make(map[string]int, m.Len())
		for i := range m.Len() {
			k, c := m.At(i)
			n, _ := c.Int()
			aj.ExceptionExecutions[k] = int(n)
		}
	}
	aj.EnqueuedAt = ajMetaTime(data, "enqueued_at")
	aj.ScheduledAt = ajMetaTime(data, "scheduled_at")
	av, _ := data.Get("arguments")
	vals, ok := av.Array()
	if !ok && av.Kind() != rubyjson.Null {
		return nil, fmt.Errorf("activejob: %s: arguments is a %s, not an array", j.JID(), av.Kind())
	}
	var err error
	if aj.Arguments, err = deserializeArguments(vals); err != nil {
		return nil, fmt.Errorf("activejob: %s (%s): %w", j.JID(), aj.JobClass, err)
	}
	return aj, nil
}

// ajMetaTime reads an ISO 8601 string (or, leniently, epoch seconds).
func ajMetaTime(m *rubyjson.Map, key string) time.Time {
	v, _ := m.Get(key)
	if s, ok := v.Str(); ok {
		t, err := parseAJTime(s)
		if err != nil {
			return time.Time{}
		}
		return t
	}
	if f, ok := v.Float(); ok {
		return contract.FromEpochSeconds(f)
	}
	return time.Time{}
}

// Kwargs splits the arguments into positional ones and the trailing
// keyword-argument hash (nil when the job was not given keywords).
func (a *Job) Kwargs() (positional []any, kwargs *Hash) {
	if n := len(a.Arguments); n > 0 {
		if h, ok := a.Arguments[n-1].(*Hash); ok && h.Kind == HashKeywords {
			return a.Arguments[:n-1], h
		}
	}
	return a.Arguments, nil
}

// Params describe an ActiveJob to enqueue from Go.
type Params struct {
	// Class is the ActiveJob class name ("job_class" and "wrapped").
	// Required.
	Class string
	// Args are the perform arguments, converted to ActiveJob's serialized
	// form as ActiveJob::Arguments.serialize does:
	//   - nil, bool, integers, floats, *big.Int and strings pass through;
	//   - slices and arrays become arrays, each element serialized;
	//   - the types of this package write their markers (Time, Date,
	//     Symbol, ...);
	//   - time.Time is a Ruby Time (TimeSerializer, nine fractional digits);
	//   - time.Duration is an ActiveSupport::Duration (the largest parts
	//     first, as ActiveSupport::Duration.build);
	//   - a map with string keys is a Ruby Hash with String keys (keys
	//     sorted, "_aj_symbol_keys": []); a map keyed by Symbol has Symbol
	//     keys;
	//   - rubyjson.Value and *rubyjson.Map are taken as already serialized
	//     (an application's custom serializer is written as Serialized or as
	//     a rubyjson.Value).
	// Anything else is an error.
	Args []any
	// Queue is the queue ("queue" and "queue_name"). Default "default".
	Queue string
	// Priority is "priority"; nil writes null.
	Priority *int
	// JobID is "job_id". Default a new random UUID.
	JobID string
	// Locale is "locale". Default "en".
	Locale string
	// Timezone is "timezone" (a Rails Time.zone name such as "UTC"); ""
	// writes null, as plain ActiveJob without Rails does.
	Timezone string
	// Executions is "executions" (0 for a new job).
	Executions int
	// ExceptionExecutions is "exception_executions" (keys sorted); nil
	// writes {}.
	ExceptionExecutions map[string]int
	// EnqueuedAt is the args[0] "enqueued_at", written in whole seconds as
	// Rails 6.1 does. Required by New; Push defaults it to
	// the client's clock.
	EnqueuedAt time.Time
	// Version picks the wrapper class and key order (Rails' JobWrapper up to 7.x, Sidekiq::ActiveJob::Wrapper from 8.0).
	// Default wire.Version6; Push defaults it to the client's.
	Version wire.Version
}

func (p *Params) validate() error {
	if p.Class == "" {
		return errors.New("activejob: Params.Class is required")
	}
	if p.EnqueuedAt.IsZero() {
		return errors.New("activejob: Params.EnqueuedAt is required")
	}
	return nil
}

// New builds the Sidekiq payload Rails 6.1's Sidekiq adapter
// writes for p (docs/sidekiq-wire.md#wrapper-payload): args[0] is the serialized job in
// ActiveJob::Core#serialize key order (job_class, job_id, provider_job_id,
// queue_name, priority, arguments, executions, exception_executions, locale,
// timezone, enqueued_at). For Sidekiq < 7.3.3 the keys are class, wrapped,
// queue, args (Rails' Client.push); from 7.3.3 they are wrapped, queue, args,
// class (Sidekiq's own adapter, Wrapper.set(...).perform_async). Push it with
// Client.Push, which adds retry, jid and the timestamps as Ruby does.
//
// The AJ hash has the Rails 6.1/7.0 shape, which newer Rails also runs.
// Arguments only Rails 7.1+ can read (BigDecimal, Range) are written
// as given; Rails 6.1 rejects them when the job runs.
func New(p *Params) (*wire.Job, error) {
	if p == nil {
		return nil, errors.New("activejob: nil Params")
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	args, err := serializeArguments(p.Args...)
	if err != nil {
		return nil, fmt.Errorf("activejob: %s: %w", p.Class, err)
	}
	queue := cmp.Or(p.Queue, "default")
	v := cmp.Or(p.Version, contract.DefaultVersion)
	jobID := cmp.Or(p.JobID, newJobID())
	priority := rubyjson.Value{}
	if p.Priority != nil {
		priority = rubyjson.IntValue(int64(*p.Priority))
	}
	timezone := rubyjson.Value{}
	if p.Timezone != "" {
		timezone = rubyjson.StringValue(p.Timezone)
	}
	excs := rubyjson.NewMap()
	for _, k := range slices.Sorted(maps.Keys(p.ExceptionExecutions)) {
		excs.Set(k, rubyjson.IntValue(int64(p.ExceptionExecutions[k])))
	}
	data := rubyjson.NewMap()
	data.Set("job_class", rubyjson.StringValue(p.Class))
	data.Set("job_id", rubyjson.StringValue(jobID))
	data.Set("provider_job_id", rubyjson.Value{})
	data.Set("queue_name", rubyjson.StringValue(queue))
	data.Set("priority", priority)
	data.Set("arguments", rubyjson.ArrayValue(args...))
	data.Set("executions", rubyjson.IntValue(int64(p.Executions)))
	data.Set("exception_executions", rubyjson.ObjectValue(excs))
	data.Set("locale", rubyjson.StringValue(cmp.Or(p.Locale, "en")))
	data.Set("timezone", timezone)
	data.Set("enqueued_at", rubyjson.StringValue(p.EnqueuedAt.UTC().Format("2006-01-02T15:04:05Z")))

	m := rubyjson.NewMap()
	class := rubyjson.StringValue(wrapperFor(v))
	if !v.AtLeast(7, 3, 3) {
		m.Set("class", class)
	}
	m.Set("wrapped", rubyjson.StringValue(p.Class))
	m.Set("queue", rubyjson.StringValue(queue))
	m.Set("args", rubyjson.ArrayValue(rubyjson.ObjectValue(data)))
	if v.AtLeast(7, 3, 3) {
		m.Set("class", class)
	}
	return wire.JobFromMap(m), nil
}

// Push builds the job with New (Version, EnqueuedAt and Queue default to the
// client's version, clock and default queue) and pushes it with c; opts
// schedules it as Rails' enqueue_at does.
func Push(ctx context.Context, c *sidekiq.Client, p *Params, opts *sidekiq.PushOpts) (*sidekiq.PushResult, error) {
	if p == nil {
		return nil, errors.New("activejob: nil Params")
	}
	q := *p
	q.Version = cmp.Or(q.Version, c.Version())
	if q.EnqueuedAt.IsZero() {
		q.EnqueuedAt = c.Clock().Now()
	}
	if q.Queue == "" {
		q.Queue = c.DefaultQueue()
	}
	job, err := New(&q)
	if err != nil {
		return nil, err
	}
	return c.Push(ctx, job, opts)
}

// newJobID returns a random UUID v4 in lowercase 8-4-4-4-12 form, as
// ActiveJob's SecureRandom.uuid.
func newJobID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("activejob: crypto/rand failed: " + err.Error())
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:])
	return string(out[:])
}
