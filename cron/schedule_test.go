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

// A schedule.yml as a Rails app writes it, in both of the loader's forms.
func TestScheduleFileInBothFormsOfTheGem(t *testing.T) {
	t.Parallel()
	jobs, err := parseFile([]byte(`
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
	require.Equal(t, `{"retry":true,"queue":"reports","class":"ReportJob","args":["daily",{"format":"pdf"}]}`, r.Message)
	require.True(t, r.Enabled)
	h := byName["heartbeat"]
	require.False(t, h.Enabled)
	require.Equal(t, "3", retryField(h.Message))
	require.Equal(t, `{"retry":3,"queue":"default","class":"HeartbeatJob","args":[]}`, h.Message)

	list, err := parseFile([]byte(`
- name: one
  cron: "@hourly"
  klass: OneJob
  args: "[1, 2]"
`))
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "OneJob", list[0].Class)
	require.Equal(t, "[1,2]", list[0].Args)

	_, err = parseFile([]byte("x:\n  cron: \"<%= 1 + 1 %>\"\n  class: A\n"))
	require.ErrorContains(t, err, "ERB")
	_, err = parseFile([]byte("x:\n  cron: \"every day at five\"\n  class: A\n"))
	require.ErrorContains(t, err, "natural language")
	_, err = parseFile([]byte("x:\n  cron: \"* * * * *\"\n"))
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
