package compat_test

import (
	"context"
	"encoding/json"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/activejob"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// ajRubySetup loads Rails 6.1's ActiveJob (Debian's ruby-activejob) with its
// Sidekiq adapter, and a GlobalID-locatable model.
const ajRubySetup = `
require "active_job"
require "active_job/arguments"
require "active_support/all"
require "bigdecimal"
require "global_id"
raise "want ActiveJob 6.1, got #{ActiveJob::VERSION::STRING}" unless ActiveJob::VERSION::STRING.start_with?("6.1.")
ActiveJob::Base.queue_adapter = :sidekiq
ActiveJob::Base.logger = Logger.new(nil)
GlobalID.app = "gojob"
Time.zone = "Eastern Time (US & Canada)"
class Person
  include GlobalID::Identification
  attr_reader :id
  def initialize(id) = @id = id
  def self.find(id) = new(id)
  def inspect = "#<Person #{id}>"
end

# aj_class_name is the real class name (TimeWithZone.name says "Time" in 6.1).
def aj_class_name(v) = Module.instance_method(:name).bind_call(v.class)

# aj_puts prints one result line; the tests read only these lines.
def aj_puts(h) = puts("aj: " + JSON.generate(h))

# AjEcho prints what it receives: each argument's class and inspect, the
# keyword arguments, the job's own fields, and Ruby's re-serialization of
# the arguments.
class AjEcho < ActiveJob::Base
  def perform(*args, **kw)
    aj_puts(
      "args" => args.map { |a| [aj_class_name(a), a.inspect] },
      "kw" => kw.map { |k, v| [k.inspect, v.class.name, v.inspect] },
      "zone" => Time.zone&.name, "job_id" => job_id, "provider_job_id" => provider_job_id,
      "queue_name" => queue_name, "priority" => priority, "executions" => executions,
      "locale" => locale, "timezone" => timezone, "enqueued_at" => enqueued_at,
      "reserialized" => JSON.generate(ActiveJob::Arguments.serialize(arguments)))
  end
end

# aj_run pops one job from queue q and runs it as Sidekiq would: the wrapper
# class named in "class", with the jid set, perform(*args).
def aj_run(q)
  msg = Sidekiq.redis { |c| c.rpop("queue:#{q}") } or raise "queue #{q} is empty"
  item = Sidekiq.load_json(msg)
  w = Object.const_get(item["class"]).new
  w.jid = item["jid"]
  w.perform(*item["args"])
end
`

// ajRequireArg compares one decoded argument: Time by instant, UTC
// offset, UTC-ness and kind; everything else with require.Equal.
func ajRequireArg(t *testing.T, want, got any, i int) {
	t.Helper()
	wt, ok := want.(activejob.Time)
	if !ok {
		require.Equal(t, want, got, "argument %d", i)
		return
	}
	gt, ok := got.(activejob.Time)
	require.True(t, ok, "argument %d is a %T", i, got)
	require.True(t, wt.Time.Equal(gt.Time), "argument %d: %v != %v", i, wt.Time, gt.Time)
	_, wo := wt.Time.Zone()
	_, gto := gt.Time.Zone()
	require.Equal(t, wo, gto, "argument %d offset", i)
	require.Equal(t, wt.Time.Location() == time.UTC, gt.Time.Location() == time.UTC, "argument %d UTC", i)
	require.Equal(t, wt.Kind, gt.Kind, "argument %d kind", i)
	require.Equal(t, wt.Zone, gt.Zone, "argument %d zone", i)
}

func ajBig(t *testing.T, s string) *big.Int {
	b, ok := new(big.Int).SetString(s, 10)
	require.True(t, ok)
	return b
}

// TestActiveJobCompatRubyEnqueuesGoReads: Rails 6.1 perform_later through
// its Sidekiq adapter, with every argument type ActiveJob 6.1 serializes;
// Go decodes each one and re-encodes the arguments to Ruby's exact bytes.
func TestActiveJobCompatRubyEnqueuesGoReads(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out := e.ruby(t, ajRubySetup+`
aj_puts("serializers" => ActiveJob::Serializers.serializers.map(&:name))
class AjRich < ActiveJob::Base
  queue_as :mailers
  def perform(*args, **kw); end
end
job = AjRich.set(priority: 5).perform_later(
  1, "two", :sym, {a: 1, "b" => 2}, {"x" => 1}.with_indifferent_access,
  Time.utc(2024, 1, 2, 3, 4, 5, Rational(123456789, 1000)), Time.new(2024, 1, 2, 3, 4, 5.5r, "+05:30"),
  DateTime.new(2024, 1, 2, 3, 4, 5, "+02:00"), Date.new(2024, 2, 29), Time.zone.local(2024, 7, 1, 12, 0, 0),
  5.minutes, 1.day + 3.hours, 2.5.hours, String, Person.new(42), BigDecimal("1.50"),
  [1, [:nested]], nil, true, 1.5, 2**70, {}, [], k: :v, n: 1)
aj_puts("jid" => job.provider_job_id)
`)
	lines := ajLines(t, out, 2)
	// ActiveJob 6.1 has exactly these serializers: no BigDecimal, no Range.
	require.Equal(t, `{"serializers":["ActiveJob::Serializers::SymbolSerializer","ActiveJob::Serializers::DurationSerializer","ActiveJob::Serializers::DateTimeSerializer","ActiveJob::Serializers::DateSerializer","ActiveJob::Serializers::TimeWithZoneSerializer","ActiveJob::Serializers::TimeSerializer","ActiveJob::Serializers::ModuleSerializer"]}`, lines[0])
	var r struct{ JID string }
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &r))
	jid := r.JID

	raw, err := redis.Bytes(e.do(t, "LINDEX", "queue:mailers", 0), nil)
	require.NoError(t, err)
	job, err := wire.ParseJob(raw)
	require.NoError(t, err)
	require.Equal(t, jid, job.JID())
	require.Equal(t, []string{"retry", "queue", "class", "wrapped", "args", "jid", "created_at", "enqueued_at"}, job.Map().Keys())
	aj, err := activejob.Decode(job)
	require.NoError(t, err)

	require.Equal(t, contract.ActiveJobWrapper, aj.Wrapper)
	require.Equal(t, "AjRich", aj.Wrapped)
	require.Equal(t, "AjRich", aj.JobClass)
	require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, aj.JobID)
	require.Equal(t, jid, aj.ProviderJobID)
	require.Equal(t, "mailers", aj.QueueName)
	require.NotNil(t, aj.Priority)
	require.Equal(t, 5, *aj.Priority)
	require.Equal(t, 0, aj.Executions)
	require.Empty(t, aj.ExceptionExecutions)
	require.Equal(t, "en", aj.Locale)
	require.Equal(t, "Eastern Time (US & Canada)", aj.Timezone)
	created, ok := job.Time("created_at")
	require.True(t, ok)
	require.Equal(t, 0, aj.EnqueuedAt.Nanosecond(), "Rails 6.1 writes whole seconds")
	require.WithinDuration(t, created, aj.EnqueuedAt, 2*time.Second)
	require.Equal(t, []string{"job_class", "job_id", "provider_job_id", "queue_name", "priority", "arguments", "executions", "exception_executions", "locale", "timezone", "enqueued_at"}, aj.Data.Keys())

	sym := func(s string) activejob.Symbol { return activejob.Symbol(s) }
	part := func(unit string, n rubyjson.Value) activejob.DurationPart {
		return activejob.DurationPart{Unit: unit, Amount: n}
	}
	want := []any{
		int64(1), "two", sym("sym"),
		&activejob.Hash{Entries: []activejob.HashEntry{{Key: "a", Symbol: true, Value: int64(1)}, {Key: "b", Value: int64(2)}}},
		&activejob.Hash{Kind: activejob.HashIndifferent, Entries: []activejob.HashEntry{{Key: "x", Value: int64(1)}}},
		activejob.Time{Time: time.Date(2024, 1, 2, 3, 4, 5, 123456789, time.UTC)},
		activejob.Time{Time: time.Date(2024, 1, 2, 3, 4, 5, 500000000, time.FixedZone("", 19800))},
		activejob.Time{Kind: activejob.TimeKindDateTime, Time: time.Date(2024, 1, 2, 3, 4, 5, 0, time.FixedZone("", 7200))},
		activejob.Date{Year: 2024, Month: time.February, Day: 29},
		activejob.Time{Kind: activejob.TimeKindTimeWithZone, Time: time.Date(2024, 7, 1, 12, 0, 0, 0, time.FixedZone("", -4*3600))},
		activejob.Duration{Seconds: rubyjson.IntValue(300), Parts: []activejob.DurationPart{part("minutes", rubyjson.IntValue(5))}},
		activejob.Duration{Seconds: rubyjson.IntValue(97200), Parts: []activejob.DurationPart{part("days", rubyjson.IntValue(1)), part("hours", rubyjson.IntValue(3))}},
		activejob.Duration{Seconds: rubyjson.FloatValue(9000), Parts: []activejob.DurationPart{part("hours", rubyjson.FloatValue(2.5))}},
		activejob.Module("String"),
		activejob.GlobalID("gid://gojob/Person/42"),
		"1.5", // a BigDecimal: ActiveJob 6.1 passes it to JSON, which writes its to_s
		[]any{int64(1), []any{sym("nested")}},
		nil, true, 1.5, ajBig(t, "1180591620717411303424"),
		&activejob.Hash{}, []any{},
		&activejob.Hash{Kind: activejob.HashKeywords, Entries: []activejob.HashEntry{{Key: "k", Symbol: true, Value: sym("v")}, {Key: "n", Symbol: true, Value: int64(1)}}},
	}
	require.Len(t, aj.Arguments, len(want))
	for i := range want {
		ajRequireArg(t, want[i], aj.Arguments[i], i)
	}
	_, kw := aj.Kwargs()
	require.NotNil(t, kw)
	require.Equal(t, sym("v"), func() any { v, _ := kw.Get("k"); return v }())

	// Byte-identical re-encoding of Ruby's arguments.
	rawArgs, _ := aj.Data.Get("arguments")
	again, err := activejob.New(&activejob.Params{Class: aj.JobClass, Args: aj.Arguments, EnqueuedAt: aj.EnqueuedAt})
	require.NoError(t, err)
	againData, _ := again.Args()[0].Map()
	enc, _ := againData.Get("arguments")
	require.Equal(t, string(rawArgs.Encode()), string(enc.Encode()))
}

// ajEcho is what AjEcho prints.
type ajEcho struct {
	Args           [][2]string `json:"args"`
	Kw             [][3]string `json:"kw"`
	Zone           string      `json:"zone"`
	JobID          string      `json:"job_id"`
	ProviderJobID  string      `json:"provider_job_id"`
	QueueName      string      `json:"queue_name"`
	Priority       *int        `json:"priority"`
	Executions     int         `json:"executions"`
	Locale         string      `json:"locale"`
	Timezone       string      `json:"timezone"`
	EnqueuedAt     string      `json:"enqueued_at"`
	Reserialized   string      `json:"reserialized"`
	DisplayClass   string      `json:"display_class"`
	DeserializeErr string      `json:"error"`
}

// ajLines returns the "aj: " lines of a Ruby script's output (Sidekiq may
// log to stdout too), requiring n of them.
func ajLines(t *testing.T, out string, n int) []string {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, "aj: "); ok {
			lines = append(lines, rest)
		}
	}
	require.Len(t, lines, n, out)
	return lines
}

func ajParseEcho(t *testing.T, line string) ajEcho {
	t.Helper()
	var out ajEcho
	require.NoError(t, json.Unmarshal([]byte(line), &out), line)
	return out
}

// TestActiveJobCompatGoPushesRubyRuns: Go builds an ActiveJob payload and
// pushes it with activejob.Push; Ruby pops it and runs it through
// Rails 6.1's JobWrapper#perform → ActiveJob::Base.execute. Every argument
// arrives as the right Ruby type, and Ruby's re-serialization of what it
// received is byte-identical to what Go wrote.
func TestActiveJobCompatGoPushesRubyRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	prio := 7
	args := []any{
		1, "two", activejob.Symbol("sym"),
		&activejob.Hash{Entries: []activejob.HashEntry{{Key: "a", Symbol: true, Value: 1}, {Key: "b", Value: 2}}},
		map[string]any{"s": "string keys"},
		&activejob.Hash{Kind: activejob.HashIndifferent, Entries: []activejob.HashEntry{{Key: "x", Value: 1}}},
		time.Date(2024, 1, 2, 3, 4, 5, 123456789, time.UTC),
		time.Date(2024, 1, 2, 3, 4, 5, 500000000, time.FixedZone("IST", 19800)),
		activejob.Time{Kind: activejob.TimeKindDateTime, Time: time.Date(2024, 1, 2, 3, 4, 5, 0, time.FixedZone("", 7200))},
		activejob.Date{Year: 2024, Month: time.February, Day: 29},
		activejob.Time{Kind: activejob.TimeKindTimeWithZone, Time: time.Date(2024, 7, 1, 12, 0, 0, 0, time.FixedZone("EDT", -4*3600))},
		90 * time.Second,
		1500 * time.Millisecond,
		8*24*time.Hour + time.Hour,
		activejob.Module("String"), activejob.Module("ActiveJob::Base"),
		activejob.GlobalID("gid://gojob/Person/42"),
		[]any{1, []any{activejob.Symbol("nested")}},
		nil, true, 1.5, ajBig(t, "1180591620717411303424"), "é /<>&\u2028",
		activejob.Keywords(map[string]any{"k": activejob.Symbol("v"), "n": 1}),
	}
	res, err := activejob.Push(ctx, e.client, &activejob.Params{
		Class: "AjEcho", Args: args, Priority: &prio, Timezone: "Eastern Time (US & Canada)", Locale: "en",
	}, nil)
	require.NoError(t, err)
	job, err := wire.ParseJob(res.Payload)
	require.NoError(t, err)
	aj, err := activejob.Decode(job)
	require.NoError(t, err)
	goArgs, _ := aj.Data.Get("arguments")

	out := e.ruby(t, ajRubySetup+`
rec = Sidekiq::Queue.new("default").first
aj_puts("display_class" => rec.display_class)
aj_run("default")
`)
	lines := ajLines(t, out, 2)
	require.Equal(t, "AjEcho", ajParseEcho(t, lines[0]).DisplayClass, "the Web UI unwraps the job")
	got := ajParseEcho(t, lines[1])

	require.Equal(t, [][2]string{
		{"Integer", "1"},
		{"String", `"two"`},
		{"Symbol", ":sym"},
		{"Hash", `{:a=>1, "b"=>2}`},
		{"Hash", `{"s"=>"string keys"}`},
		{"ActiveSupport::HashWithIndifferentAccess", `{"x"=>1}`},
		{"Time", "2024-01-02 03:04:05.123456789 UTC"},
		{"Time", "2024-01-02 03:04:05.5 +0530"},
		{"DateTime", "Tue, 02 Jan 2024 03:04:05 +0200"},
		{"Date", "Thu, 29 Feb 2024"},
		{"ActiveSupport::TimeWithZone", "Mon, 01 Jul 2024 12:00:00.000000000 EDT -04:00"},
		{"ActiveSupport::Duration", "1 minute and 30 seconds"},
		{"ActiveSupport::Duration", "1.5 seconds"},
		{"ActiveSupport::Duration", "1 week, 1 day, and 1 hour"},
		{"Class", "String"},
		{"Class", "ActiveJob::Base"},
		{"Person", "#<Person 42>"},
		{"Array", "[1, [:nested]]"},
		{"NilClass", "nil"},
		{"TrueClass", "true"},
		{"Float", "1.5"},
		{"Integer", "1180591620717411303424"},
		{"String", `"é /<>&\u2028"`}, // Ruby's inspect escapes U+2028; the value itself is raw
	}, got.Args)
	require.Equal(t, [][3]string{{":k", "Symbol", ":v"}, {":n", "Integer", "1"}}, got.Kw, "kwargs arrive as keywords")
	require.Equal(t, aj.JobID, got.JobID)
	require.Equal(t, res.JID, got.ProviderJobID)
	require.Equal(t, "default", got.QueueName)
	require.NotNil(t, got.Priority)
	require.Equal(t, 7, *got.Priority)
	require.Equal(t, 1, got.Executions, "perform_now counts this execution")
	require.Equal(t, "en", got.Locale)
	require.Equal(t, "Eastern Time (US & Canada)", got.Timezone)
	require.Equal(t, "Eastern Time (US & Canada)", got.Zone, "the job runs in its timezone")
	enq, _ := aj.Data.Get("enqueued_at")
	enqStr, _ := enq.Str()
	require.Equal(t, enqStr, got.EnqueuedAt)
	require.Equal(t, string(goArgs.Encode()), got.Reserialized, "Ruby re-serializes what it received to Go's exact bytes")
}

// TestActiveJobCompatRails71Serializers: ActiveJob 6.1 cannot run
// BigDecimal and Range (Rails 7.1+ serializers): the job fails with
// DeserializationError. With the Rails 7.1 serializer code added
// (activejob/lib/active_job/serializers/{big_decimal,range}_serializer.rb at
// v7.1.0, reproduced below) the same payloads deserialize to BigDecimal and
// Range.
func TestActiveJobCompatRails71Serializers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	args := []any{
		activejob.BigDecimal("1.50"), activejob.BigDecimal("-0.000123"),
		activejob.Range{Begin: 1, End: 10, ExcludeEnd: true},
		activejob.Range{Begin: activejob.Date{Year: 2024, Month: 1, Day: 1}},
		activejob.Range{Begin: "a", End: "z"},
	}
	for range 2 {
		_, err := activejob.Push(ctx, e.client, &activejob.Params{Class: "AjEcho", Args: args}, nil)
		require.NoError(t, err)
	}
	out := e.ruby(t, ajRubySetup+`
begin
  aj_run("default")
rescue => err
  aj_puts("error" => "#{err.class}: #{err.message}")
end
module ActiveJob
 module Serializers
  class BigDecimalSerializer < ObjectSerializer
    def serialize(big_decimal) = super("value" => big_decimal.to_s)
    def deserialize(hash) = BigDecimal(hash["value"])
    private def klass = BigDecimal
  end
  class RangeSerializer < ObjectSerializer
    KEYS = %w[begin end exclude_end].freeze
    def serialize(range)
      args = Arguments.serialize([range.begin, range.end, range.exclude_end?])
      super(KEYS.zip(args).to_h)
    end
    def deserialize(hash) = klass.new(*Arguments.deserialize(hash.values_at(*KEYS)))
    private def klass = ::Range
  end
 end
end
ActiveJob::Serializers.add_serializers(ActiveJob::Serializers::BigDecimalSerializer, ActiveJob::Serializers::RangeSerializer)
aj_run("default")
`)
	lines := ajLines(t, out, 2)
	// Client.Push LPUSHes and Ruby RPOPs: the first job pushed runs first.
	require.Equal(t, "ActiveJob::DeserializationError: Error while trying to deserialize arguments: Serializer ActiveJob::Serializers::BigDecimalSerializer is not known",
		ajParseEcho(t, lines[0]).DeserializeErr)
	require.Equal(t, [][2]string{
		{"BigDecimal", "0.15e1"},
		{"BigDecimal", "-0.123e-3"},
		{"Range", "1...10"},
		{"Range", "Mon, 01 Jan 2024.."},
		{"Range", `"a".."z"`},
	}, ajParseEcho(t, lines[1]).Args)
}
