package cron

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// The forms sidekiq-cron accepts through fugit that gojob supports parse;
// the ones it does not support are errors, never a different schedule.
func TestScheduleParsesFugitFormsOrRefusesThem(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"* * * * *", "*/5 * * * *", "30 * * * * *", "0 9 * * mon-fri", "@hourly", "@daily",
		"@midnight", "@noon", "@weekly", "@monthly", "@yearly", "@annually", "0 5 * * * Europe/Berlin", "0 5 * * * UTC",
		"0 5 * * * +0100", "0 0 * * 7", "every 5 minutes", "every weekday at 7:30", "every monday and friday at 5pm",
		"every day at noon Europe/Berlin"} {
		_, err := ParseSchedule(ok)
		require.NoError(t, err, ok)
	}
	for _, bad := range []string{"", "every day at five", "every day at 12am", "every day at 11:45pm", "every fortnight", "0 0 L * *", "0 0 * * 1#2", "0 0 -1 * *", "@reboot",
		"0 5 * * * Mars/Olympus", "* * *"} {
		_, err := ParseSchedule(bad)
		require.Error(t, err, bad)
	}
}

// Previous is fugit's previous_time: the latest tick at or before now−1 s,
// so a tick counts only from one second after it; none older than within.
func TestPreviousTickIsFugitsPreviousTime(t *testing.T) {
	t.Parallel()
	every, err := ParseSchedule("* * * * *")
	require.NoError(t, err)
	tick, ok := every.Previous(at("2024-01-01T12:00:00.5Z"), time.Minute, time.UTC)
	require.True(t, ok)
	require.Equal(t, at("2024-01-01T11:59:00Z"), tick)
	tick, ok = every.Previous(at("2024-01-01T12:00:01Z"), time.Minute, time.UTC)
	require.True(t, ok)
	require.Equal(t, at("2024-01-01T12:00:00Z"), tick)

	hourly, err := ParseSchedule("0 * * * *")
	require.NoError(t, err)
	_, ok = hourly.Previous(at("2024-01-01T12:01:02Z"), time.Minute, time.UTC)
	require.False(t, ok, "62 s after the tick is past the grace")
	tick, ok = hourly.Previous(at("2024-01-01T12:01:00Z"), time.Minute, time.UTC)
	require.True(t, ok, "60 s after is within it, as the gem's `> 60`")
	require.Equal(t, at("2024-01-01T12:00:00Z"), tick)

	berlin, err := ParseSchedule("0 5 * * * Europe/Berlin")
	require.NoError(t, err)
	tick, ok = berlin.Previous(at("2024-01-01T04:00:30Z"), time.Minute, time.UTC)
	require.True(t, ok)
	require.Equal(t, at("2024-01-01T04:00:00Z"), tick.UTC(), "05:00 in Berlin is 04:00 UTC in winter")

	secs, err := ParseSchedule("*/10 * * * * *")
	require.NoError(t, err)
	tick, ok = secs.Previous(at("2024-01-01T12:00:25Z"), time.Minute, time.UTC)
	require.True(t, ok)
	require.Equal(t, at("2024-01-01T12:00:20Z"), tick)
}

// A schedule.yml as a Rails app writes it, in both of the loader's forms.
func TestScheduleFileInBothFormsOfTheGem(t *testing.T) {
	t.Parallel()
	jobs, err := ParseFile([]byte(`
nightly_report:
  cron: "0 3 * * *"
  class: "ReportJob"
  queue: reports
  args: ["daily", {"format": "pdf"}]
  description: "The nightly report"
heartbeat:
  cron: "*/5 * * * *"
  class: "HeartbeatJob"
  status: disabled
  retry: 3
`))
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	byName := map[string]*Job{}
	for _, j := range jobs {
		byName[j.Name] = j
		require.Equal(t, "schedule", j.Source)
	}
	r := byName["nightly_report"]
	require.Equal(t, "ReportJob", r.Class)
	require.Equal(t, "reports", r.Queue())
	require.Equal(t, `["daily",{"format":"pdf"}]`, r.Args)
	require.Equal(t, `{"queue":"reports","class":"ReportJob","args":["daily",{"format":"pdf"}]}`, r.Message)
	require.True(t, r.Enabled)
	h := byName["heartbeat"]
	require.False(t, h.Enabled)
	require.Equal(t, "3", h.Retry)
	require.Equal(t, `{"queue":"default","class":"HeartbeatJob","args":[],"retry":3}`, h.Message)

	list, err := ParseFile([]byte(`
- name: one
  cron: "@hourly"
  klass: OneJob
  args: "[1, 2]"
`))
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "OneJob", list[0].Class)
	require.Equal(t, "[1,2]", list[0].Args)

	_, err = ParseFile([]byte("x:\n  cron: \"<%= 1 + 1 %>\"\n  class: A\n"))
	require.ErrorContains(t, err, "ERB")
	_, err = ParseFile([]byte("x:\n  cron: \"every day at five\"\n  class: A\n"))
	require.ErrorContains(t, err, "natural language")
	_, err = ParseFile([]byte("x:\n  cron: \"* * * * *\"\n"))
	require.ErrorContains(t, err, "class must be set")
}

// The ENV tags of a schedule file are evaluated as Ruby's ERB would.
func TestScheduleFileEnvERB(t *testing.T) {
	t.Parallel()
	env := map[string]string{"CRON": "*/10 * * * *", "Q": "mail"}
	get := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	out, err := renderERB(`a: "<%= ENV['CRON'] %>" b: "<%= ENV.fetch("Q") %>" c: "<%= ENV.fetch('NONE', 'low') %>" d: "<%= ENV["NONE"] %>"`, get)
	require.NoError(t, err)
	require.Equal(t, `a: "*/10 * * * *" b: "mail" c: "low" d: ""`, out)
	_, err = renderERB(`<%= ENV.fetch('NONE') %>`, get)
	require.ErrorContains(t, err, `ENV.fetch("NONE")`)
	_, err = renderERB(`<% if x %>`, get)
	require.ErrorContains(t, err, "render the file first")
}
