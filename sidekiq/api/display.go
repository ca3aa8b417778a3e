package api

import (
	"strings"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// The mailer jobs whose display Sidekiq unwraps one step further
// (JobRecord#display_class, lib/sidekiq/api.rb, 8.1.7).
const (
	mailerDeliveryJob     = "ActionMailer::DeliveryJob"
	mailerMailDeliveryJob = "ActionMailer::MailDeliveryJob"
)

// displayClass is the class a person reads for job j, as Sidekiq's Web UI
// shows it (JobRecord#display_class, lib/sidekiq/api.rb, 8.1.7): the
// payload's "display_class" when set; for an ActiveJob wrapper its
// "wrapped" class (or args[0] when there is none), and for a mailer job
// "MailerClass#method"; otherwise the class.
func displayClass(j *wire.Job) string {
	if j == nil {
		return ""
	}
	if v, ok := j.Get("display_class"); ok {
		if s, ok := v.Str(); ok && s != "" {
			return s
		}
	}
	if !contract.IsActiveJobWrapper(j.Class()) {
		return j.Class()
	}
	data := activeJobData(j)
	jobClass := contract.Wrapped(j)
	if jobClass == "" {
		// Ruby falls back to args[0] itself; the hash's job_class is what
		// it names.
		jobClass = mapStr(data, "job_class")
	}
	if jobClass == mailerDeliveryJob || jobClass == mailerMailDeliveryJob {
		if args := ajArguments(data); len(args) >= 2 {
			var parts []string
			for _, a := range args[:2] {
				if s, ok := a.Str(); ok {
					parts = append(parts, s)
				} else {
					parts = append(parts, string(a.Encode()))
				}
			}
			return strings.Join(parts, "#")
		}
	}
	if jobClass == "" {
		return j.Class()
	}
	return jobClass
}

// displayArgs are the arguments a person reads for job j, as Sidekiq's
// Web UI shows them (JobRecord#display_args, lib/sidekiq/api.rb, 8.1.7):
// an ActiveJob's own arguments with ActiveJob's serialization undone
// (GlobalIDs as their URI, "_aj_" keys dropped), a mailer job's without
// the mailer, method and delivery method; an encrypted job's last
// argument as "[encrypted data]"; otherwise the args.
func displayArgs(j *wire.Job) []rubyjson.Value {
	if j == nil {
		return nil
	}
	if !contract.IsActiveJobWrapper(j.Class()) {
		args := j.Args()
		if v, ok := j.Get("encrypt"); ok && v.Truthy() && len(args) > 0 {
			args = append(args[:len(args)-1:len(args)-1], rubyjson.StringValue("[encrypted data]"))
		}
		return args
	}
	data := activeJobData(j)
	wrapped := contract.Wrapped(j)
	var args []rubyjson.Value
	if wrapped != "" {
		for _, a := range ajArguments(data) {
			args = append(args, deserializeDisplay(a))
		}
	}
	kind := wrapped
	if kind == "" {
		kind = mapStr(data, "job_class")
	}
	switch kind {
	case mailerDeliveryJob:
		return dropN(args, 3)
	case mailerMailDeliveryJob:
		rest := dropN(args, 3)
		if len(rest) == 0 {
			return nil
		}
		m, ok := rest[0].Map()
		if !ok {
			return rest
		}
		params, _ := m.Get("params")
		margs, _ := m.Get("args")
		return []rubyjson.Value{params, margs}
	}
	return args
}

// DisplayClass is the class a person reads for the record's job, as
// Sidekiq's Web UI shows it (JobRecord#display_class, lib/sidekiq/api.rb,
// 8.1.7): the payload's "display_class" when set; for an ActiveJob wrapper
// its "wrapped" class (or args[0] when there is none), and for a mailer
// job "MailerClass#method"; otherwise the class ("" when unparsable).
// For a payload that is not a record (a running job's), wrap it:
// (&api.JobRecord{Job: job}).DisplayClass().
func (r *JobRecord) DisplayClass() string { return displayClass(r.Job) }

// DisplayArgs are the arguments a person reads for the record's job, as
// Sidekiq's Web UI shows them (JobRecord#display_args, lib/sidekiq/api.rb,
// 8.1.7): an ActiveJob's own arguments with ActiveJob's serialization
// undone (GlobalIDs as their URI, "_aj_" keys dropped), a mailer job's
// without the mailer, method and delivery method; an encrypted job's last
// argument as "[encrypted data]"; otherwise the args. For an unparsable
// payload the raw string, as Args.
func (r *JobRecord) DisplayArgs() []rubyjson.Value {
	if r.Job == nil {
		return r.Args()
	}
	return displayArgs(r.Job)
}

// matchesClass reports whether the job is of class name under either of
// its names: the payload's class or the one displayed (an ActiveJob's
// wrapped class, a mailer's "Mailer#method", or the mailer alone).
func matchesClass(j *wire.Job, name string) bool {
	if j == nil {
		return false
	}
	if j.Class() == name || contract.Wrapped(j) == name {
		return true
	}
	d := displayClass(j)
	if d == name {
		return true
	}
	mailer, _, ok := strings.Cut(d, "#")
	return ok && mailer == name
}

func activeJobData(j *wire.Job) *rubyjson.Map {
	args := j.Args()
	if len(args) == 0 {
		return nil
	}
	m, _ := args[0].Map()
	return m
}

func ajArguments(data *rubyjson.Map) []rubyjson.Value {
	if data == nil {
		return nil
	}
	v, _ := data.Get("arguments")
	a, _ := v.Array()
	return a
}

func mapStr(m *rubyjson.Map, key string) string {
	if m == nil {
		return ""
	}
	v, _ := m.Get(key)
	s, _ := v.Str()
	return s
}

func dropN(vs []rubyjson.Value, n int) []rubyjson.Value {
	if len(vs) <= n {
		return nil
	}
	return vs[n:]
}

// deserializeDisplay is Sidekiq's JobRecord#deserialize_argument
// (lib/sidekiq/api.rb, 8.1.7): a {"_aj_globalid": uri} hash becomes the
// uri, other hashes lose their "_aj_" keys, arrays are walked.
func deserializeDisplay(v rubyjson.Value) rubyjson.Value {
	switch v.Kind() {
	case rubyjson.Array:
		a, _ := v.Array()
		out := make([]rubyjson.Value, len(a))
		for i, e := range a {
			out[i] = deserializeDisplay(e)
		}
		return rubyjson.ArrayValue(out...)
	case rubyjson.Object:
		m, _ := v.Map()
		if m.Len() == 1 {
			if gid, ok := m.Get("_aj_globalid"); ok {
				return gid
			}
		}
		out := rubyjson.NewMap()
		for i := range m.Len() {
			k, e := m.At(i)
			if strings.HasPrefix(k, "_aj_") {
				continue
			}
			out.Set(k, deserializeDisplay(e))
		}
		return rubyjson.ObjectValue(out)
	}
	return v
}
