// Package cron runs periodic jobs on the data of the sidekiq-cron gem, so
// that Ruby processes running sidekiq-cron and gojob processes serve one
// schedule, and the gem's Web UI tab lists and controls gojob's entries.
// docs/cron.md describes the Redis layout (both the gem's 1.x and 2.x
// forms) and how a tick is enqueued exactly once.
package cron

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/cronschedule"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// Layout is the gem's key layout: 1.x keeps every job in one set
// (cron_jobs, cron_job:NAME); 2.x has namespaces (cron_jobs:NS,
// cron_job:NS:NAME), "default" unless configured.
type Layout struct {
	// V1 selects the 1.x keys (sidekiq-cron before 2.0, such as Debian's
	// 1.8.0 beside Sidekiq 6.4.1).
	V1 bool
	// Namespace is the 2.x namespace ("" = "default", the gem's default).
	Namespace string
}

func (l Layout) ns() string {
	if l.Namespace == "" {
		return "default"
	}
	return l.Namespace
}

// setKey is the set of the jobs' hash keys.
func (l Layout) setKey() string { return contract.CronSetKey(l.V1, l.Namespace) }

// jobKey is the hash of job name.
func (l Layout) jobKey(name string) string {
	if l.V1 {
		return "cron_job:" + name
	}
	return "cron_job:" + l.ns() + ":" + name
}

// enqueuedKey is the sorted set of ticks already enqueued.
func (l Layout) enqueuedKey(name string) string { return l.jobKey(name) + ":enqueued" }

// historyKey is the list of the last pushes' jids.
func (l Layout) historyKey(name string) string { return l.jobKey(name) + ":jid_history" }

func (l Layout) String() string {
	if l.V1 {
		return "sidekiq-cron 1.x"
	}
	return "sidekiq-cron 2.x, namespace " + l.ns()
}

// Job is one periodic job: the fields of the gem's cron_job hash.
type Job struct {
	Name        string
	Namespace   string // 2.x only
	Class       string // the hash's "klass"
	Cron        string
	Description string
	// Source is "schedule" (from a schedule file: removed from Redis when
	// the file no longer has it) or "dynamic" (added by hand or API).
	Source string
	// Args is the JSON array of arguments.
	Args string
	// Message is the JSON of the Sidekiq job template (queue, class, retry,
	// other options); the push replaces its args.
	Message        string
	Enabled        bool
	ActiveJob      bool
	DateAsArgument bool
	SymbolizeArgs  bool
	QueuePrefix    string // queue_name_prefix (ActiveJob)
	QueueDelimiter string // queue_name_delimiter (ActiveJob)
	// LastEnqueue is the last push (zero: never).
	LastEnqueue time.Time

	// statusSet: a schedule file gave the status; otherwise a reload keeps
	// the one in Redis (a disable from the Web UI survives a restart).
	statusSet bool
}

// lastEnqueueFormat is Ruby's strftime('%Y-%m-%d %H:%M:%S %z'), the gem's
// last_enqueue_time format (sidekiq-cron lib/sidekiq/cron/job.rb,
// LAST_ENQUEUE_TIME_FORMAT, 1.8.0 and 2.x).
const lastEnqueueFormat = "2006-01-02 15:04:05 -0700"

// NewJob returns an enabled dynamic job pushing class with args (converted
// with rubyjson.FromGo; rubyjson values are taken as they are) to queue ("" =
// default) on schedule cron, its message built as the gem builds it for a
// Sidekiq job class it loads, whose sidekiq_options are Sidekiq's defaults:
// {"retry":true,"queue":…,"class":…,"args":…} (sidekiq-cron
// lib/sidekiq/cron/job.rb initialize, 1.8.0 and 2.x: the class's options
// merged with class and args).
func NewJob(name, cronLine, class, queue string, args ...any) (*Job, error) {
	v, err := rubyjson.FromGo(args)
	if err != nil {
		return nil, fmt.Errorf("cron job %s: args: %w", name, err)
	}
	return newJobJSON(name, cronLine, class, queue, string(v.Encode()))
}

// newJobJSON is NewJob with the arguments as a JSON array ("" = []).
func newJobJSON(name, cronLine, class, queue, args string) (*Job, error) {
	if queue == "" {
		queue = "default"
	}
	if args == "" {
		args = "[]"
	}
	v, err := rubyjson.Parse([]byte(args))
	if err != nil || v.Kind() != rubyjson.Array {
		return nil, fmt.Errorf("cron job %s: args must be a JSON array, got %q", name, args)
	}
	m := rubyjson.NewMap()
	m.Set("retry", rubyjson.BoolValue(true))
	m.Set("queue", rubyjson.StringValue(queue))
	m.Set("class", rubyjson.StringValue(class))
	m.Set("args", v)
	j := &Job{Name: name, Class: class, Cron: cronLine, Source: "dynamic", Args: string(v.Encode()),
		Message: string(m.Encode()), Enabled: true}
	return j, j.validate()
}

// setMessageRetry adds the retry option to the message, as the gem does
// when a schedule gives one.
func (j *Job) setMessageRetry(r any) error {
	m, err := rubyjson.ParseObject([]byte(j.Message))
	if err != nil {
		return err
	}
	v, err := rubyjson.FromGo(r)
	if err != nil {
		return fmt.Errorf("cron job %s: retry: %w", j.Name, err)
	}
	m.Set("retry", v)
	j.Message = string(m.Encode())
	return nil
}

// Queue returns the queue of the job's message ("default" when none).
func (j *Job) Queue() string {
	if v, err := rubyjson.ParseObject([]byte(j.Message)); err == nil {
		if q, ok := v.Get("queue"); ok {
			if name, isStr := q.Str(); isStr && name != "" {
				return name
			}
		}
	}
	return "default"
}

// status is "enabled" or "disabled", as the hash stores it.
func (j *Job) status() string {
	if j.Enabled {
		return "enabled"
	}
	return "disabled"
}

// validate checks what the gem's valid? checks (a name, a parsable cron, a
// class) and that args and message are JSON of the right shape.
func (j *Job) validate() error {
	if j.Name == "" {
		return fmt.Errorf("cron job: name must be set")
	}
	if strings.TrimSpace(j.Class) == "" {
		return fmt.Errorf("cron job %s: class must be set", j.Name)
	}
	if _, err := cronschedule.Parse(j.Cron); err != nil {
		return fmt.Errorf("cron job %s: %w", j.Name, err)
	}
	if j.Args != "" {
		v, err := rubyjson.Parse([]byte(j.Args))
		if err != nil || v.Kind() != rubyjson.Array {
			return fmt.Errorf("cron job %s: args must be a JSON array, got %q", j.Name, j.Args)
		}
	}
	if j.Message != "" {
		if _, err := rubyjson.ParseObject([]byte(j.Message)); err != nil {
			return fmt.Errorf("cron job %s: message must be a JSON object: %w", j.Name, err)
		}
	}
	return nil
}

var truthy = regexp.MustCompile(`(?i)^(true|t|yes|y|1)$`)

// parseBool reads a boolean field as the gem does.
func parseBool(s string) bool { return truthy.MatchString(s) }

// fields returns the hash fields in the gem's to_hash order for layout l.
// 1.x (1.8.0) writes Ruby's nil as "" and booleans as true/false; 2.x
// writes "1"/"0".
func (j *Job) fields(l Layout) []any {
	b := func(v bool) string {
		switch {
		case l.V1 && v:
			return "true"
		case l.V1:
			return "false"
		case v:
			return "1"
		}
		return "0"
	}
	args := j.Args
	if args == "" {
		args = "[]"
	}
	msg := j.Message
	if msg == "" {
		msg = "{}"
	}
	last := ""
	if !j.LastEnqueue.IsZero() {
		last = j.LastEnqueue.UTC().Format(lastEnqueueFormat)
	}
	out := []any{"name", j.Name}
	if !l.V1 {
		out = append(out, "namespace", l.ns())
	}
	out = append(out, "klass", j.Class, "cron", j.Cron, "description", j.Description)
	source := j.Source
	if source == "" {
		source = "dynamic"
	}
	if !l.V1 || source == "schedule" {
		// 1.x has no source field: a dynamic job's hash is the gem's. A job
		// of a schedule file keeps "schedule", which the gem ignores and
		// gojob needs to delete the jobs the file no longer has.
		out = append(out, "source", source)
	}
	out = append(out, "args", args, "date_as_argument", b(j.DateAsArgument))
	out = append(out, "message", msg, "status", j.status(), "active_job", b(j.ActiveJob),
		"queue_name_prefix", j.QueuePrefix, "queue_name_delimiter", j.QueueDelimiter)
	if !l.V1 {
		out = append(out, "retry", retryField(msg))
	}
	out = append(out, "last_enqueue_time", last, "symbolize_args", b(j.SymbolizeArgs))
	return out
}

// retryField is the 2.x hash's "retry": the message's retry option as the
// gem's to_hash writes it (sidekiq-cron 2.3.1 lib/sidekiq/cron/job.rb:
// @retry is the message's "retry", written nil as "", a Numeric as Redis
// prints it, anything else with to_s), so "true" for a Sidekiq job class
// with the default options and "" for a message without the option.
func retryField(msg string) string {
	m, err := rubyjson.ParseObject([]byte(msg))
	if err != nil {
		return ""
	}
	v, ok := m.Get("retry")
	if !ok {
		return ""
	}
	switch v.Kind() {
	case rubyjson.Null:
		return ""
	case rubyjson.Bool:
		b, _ := v.Bool()
		return strconv.FormatBool(b)
	case rubyjson.Integer, rubyjson.Float:
		return string(v.Encode())
	case rubyjson.String:
		s, _ := v.Str()
		return s
	}
	// An array or a hash, which Sidekiq does not take as a retry option.
	return string(v.Encode())
}

// jobFromHash reads a cron_job hash.
func jobFromHash(h map[string]string) *Job {
	j := &Job{
		Name: h["name"], Namespace: h["namespace"], Class: h["klass"], Cron: h["cron"],
		Description: h["description"], Source: h["source"], Args: h["args"], Message: h["message"],
		Enabled: h["status"] == "enabled", ActiveJob: parseBool(h["active_job"]),
		DateAsArgument: parseBool(h["date_as_argument"]), SymbolizeArgs: parseBool(h["symbolize_args"]),
		QueuePrefix: h["queue_name_prefix"], QueueDelimiter: h["queue_name_delimiter"],
	}
	if j.Class == "" {
		j.Class = h["class"]
	}
	j.LastEnqueue = parseLastEnqueue(h["last_enqueue_time"])
	return j
}

// parseLastEnqueue reads last_enqueue_time in the gem's format, or the
// older forms its fallback (DateTime.parse) accepts: "… UTC" and ISO 8601.
func parseLastEnqueue(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	for _, layout := range []string{lastEnqueueFormat, "2006-01-02 15:04:05 MST", time.RFC3339Nano, "2006-01-02 15:04:05"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t
		}
	}
	return time.Time{}
}
