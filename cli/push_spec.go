package cli

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/orderedstore"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// pushSpec is one job of `gojob push`: the command's flags, or a line of
// `gojob push -` laid over them. One builder for both makes a line write
// the bytes the same flags would.
type pushSpec struct {
	class       string
	args        []rubyjson.Value
	queue       string
	retry       string // "", "true", "false" or a number of retries
	in          time.Duration
	at          string // RFC 3339 or epoch seconds
	expiresIn   time.Duration
	jid         string
	uniqueFor   *float64
	uniqueUntil string
	timeout     *float64
	hbTimeout   *float64
	key         string // an ordered queue's ordering key
	score       *float64
	batch       string
	durable     bool

	// fromLine names options as the line's fields ("retry") rather than as
	// flags ("--retry") in errors.
	fromLine bool
}

// name is how errors call an option: its flag or its field.
func (s *pushSpec) name(field string) string {
	if s.fromLine {
		return field
	}
	return "--" + strings.ReplaceAll(field, "_", "-")
}

// build makes the job and its push options, checked as Sidekiq's client
// would check them, without Redis.
func (s *pushSpec) build() (*wire.Job, *sidekiq.PushOpts, error) {
	if err := s.check(); err != nil {
		return nil, nil, err
	}
	job, err := wire.NewJob(s.class)
	if err != nil {
		return nil, nil, err
	}
	job.Set("args", rubyjson.ArrayValue(s.args...))
	job.SetQueue(s.queue)
	switch s.retry {
	case "":
	case "true":
		job.Set("retry", rubyjson.BoolValue(true))
	case "false":
		job.Set("retry", rubyjson.BoolValue(false))
	default:
		n, err := strconv.Atoi(s.retry)
		if err != nil || n < 0 {
			return nil, nil, fmt.Errorf("%s must be true, false or a number", s.name("retry"))
		}
		job.Set("retry", rubyjson.IntValue(int64(n)))
	}
	if s.jid != "" {
		job.Set("jid", rubyjson.StringValue(s.jid))
	}
	if s.uniqueFor != nil {
		job.Set("unique_for", rubyjson.FloatValue(*s.uniqueFor))
	}
	if s.uniqueUntil != "" {
		job.Set("unique_until", rubyjson.StringValue(s.uniqueUntil))
	}
	for _, f := range []struct {
		field, key string
		v          *float64
	}{{"timeout", contract.KeyTimeout, s.timeout}, {"heartbeat_timeout", contract.KeyHeartbeatTimeout, s.hbTimeout}} {
		if f.v == nil {
			continue
		}
		v := rubyjson.FloatValue(*f.v)
		if *f.v == float64(int64(*f.v)) {
			v = rubyjson.IntValue(int64(*f.v))
		}
		if _, err := contract.LimitSeconds(f.key, v); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", s.name(f.field), err)
		}
		job.Set(f.key, v)
	}
	if s.expiresIn > 0 {
		// As Sidekiq Pro's set(expires_in:): the client turns it into
		// expires_at, counted from the time the job is due, on every path
		// (push, push_bulk, batches, durable rows).
		v := rubyjson.FloatValue(s.expiresIn.Seconds())
		if s.expiresIn%time.Second == 0 {
			v = rubyjson.IntValue(int64(s.expiresIn / time.Second))
		}
		job.Set("expires_in", v)
	}
	opts := &sidekiq.PushOpts{In: s.in}
	if s.at != "" {
		t, err := parseTime(s.at)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", s.name("at"), err)
		}
		opts.At = t
	}
	rubyCallOrder(job, !opts.At.IsZero() || opts.In != 0)
	if err := contract.Validate(job); err != nil {
		return nil, nil, err
	}
	return job, opts, nil
}

// check refuses the combinations push refuses.
func (s *pushSpec) check() error {
	if s.uniqueUntil != "" && s.uniqueFor == nil {
		return fmt.Errorf("%s needs %s", s.name("unique_until"), s.name("unique_for"))
	}
	if s.uniqueFor != nil && *s.uniqueFor <= 0 {
		return fmt.Errorf("%s must be a positive number of seconds", s.name("unique_for"))
	}
	if u := s.uniqueUntil; u != "" && u != "start" && u != "success" {
		return fmt.Errorf("%s must be start or success", s.name("unique_until"))
	}
	if s.expiresIn < 0 {
		return fmt.Errorf("%s must not be negative", s.name("expires_in"))
	}
	if s.key != "" {
		if s.expiresIn != 0 {
			return fmt.Errorf("%s takes no %s (ordered jobs do not expire)", s.name("key"), s.name("expires_in"))
		}
		if s.durable {
			return fmt.Errorf("--durable does not apply to ordered queues (%s)", s.name("key"))
		}
		if s.in != 0 || s.at != "" || s.uniqueFor != nil || s.retry != "" {
			return fmt.Errorf("%s takes no %s, %s, %s or %s (ordered queues retry per key)", s.name("key"),
				s.name("in"), s.name("at"), s.name("unique_for"), s.name("retry"))
		}
		if err := orderedstore.ValidQueue(cmp.Or(s.queue, "default")); err != nil {
			return err
		}
	} else if s.score != nil {
		return fmt.Errorf("%s needs %s", s.name("score"), s.name("key"))
	}
	if s.batch != "" && (s.in != 0 || s.at != "" || s.key != "" || s.uniqueFor != nil) {
		return fmt.Errorf("%s takes no %s, %s, %s or %s (batch jobs are pushed now, as plain jobs)", s.name("batch"),
			s.name("in"), s.name("at"), s.name("key"), s.name("unique_for"))
	}
	return nil
}

// rubyCallOrder puts the keys of a `gojob push` in the order of Ruby's
// `CLASS.set(options).perform_async(*args)`: the options, then "args",
// then "class"; scheduled, `perform_in`/`perform_at` put "class" before
// "args" (Sidekiq's lib/sidekiq/job.rb Setter, 6.4.1 to 8.1.7; captured in
// testdata/ruby-fixtures/*/client_perform_async.json, client_perform_in.json
// and 6.4.1/perform_async_set_options.json).
func rubyCallOrder(job *wire.Job, scheduled bool) {
	m := job.Map()
	out := rubyjson.NewMap()
	for i := range m.Len() {
		if k, v := m.At(i); k != "class" && k != "args" {
			out.Set(k, v)
		}
	}
	class, _ := m.Get("class")
	args, _ := m.Get("args")
	if scheduled {
		out.Set("class", class)
		out.Set("args", args)
	} else {
		out.Set("args", args)
		out.Set("class", class)
	}
	*m = *out
}

// pushJobFromFlags builds the job `gojob push` pushes and checks it as
// Sidekiq's client would, without Redis: bad input is a usage error (exit
// 2) even when Redis is down.
func pushJobFromFlags(c *ucli.Context) (*wire.Job, *sidekiq.PushOpts, error) {
	args := c.Args().Slice()
	if len(args) == 0 {
		return nil, nil, ucli.Exit("push: CLASS is required", exitUsage)
	}
	s := pushSpecFromFlags(c)
	s.class = args[0]
	for _, a := range args[1:] {
		v, err := rubyjson.Parse([]byte(a))
		if err != nil {
			v = rubyjson.StringValue(a)
		}
		s.args = append(s.args, v)
	}
	job, opts, err := s.build()
	if err != nil {
		return nil, nil, ucli.Exit("push: "+err.Error(), exitUsage)
	}
	return job, opts, nil
}

// pushSpecFromFlags reads push's job options from its flags.
func pushSpecFromFlags(c *ucli.Context) *pushSpec {
	s := &pushSpec{queue: c.String("queue"), retry: c.String("retry"), in: c.Duration("in"), at: c.String("at"), expiresIn: c.Duration("expires-in"),
		uniqueUntil: c.String("unique-until"), key: c.String("key"), batch: c.String("batch"), durable: c.Bool("durable")}
	for flag, p := range map[string]**float64{"unique-for": &s.uniqueFor, "timeout": &s.timeout,
		"heartbeat-timeout": &s.hbTimeout, "score": &s.score} {
		if c.IsSet(flag) {
			v := c.Float64(flag)
			*p = &v
		}
	}
	return s
}

func parseTime(s string) (time.Time, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return contract.FromEpochSeconds(f), nil
	}
	return time.Parse(time.RFC3339, s)
}
