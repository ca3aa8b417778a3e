package cron

import (
	"fmt"
	"os"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// LoadFile reads a schedule in sidekiq-cron's schedule.yml format: a map of
// name → options, or a list of options with a name each. Options: cron,
// class (or klass), queue, args, description, status, active_job,
// queue_name_prefix, queue_name_delimiter, retry, date_as_argument,
// symbolize_args, message. The jobs are marked source "schedule". Of ERB,
// only <%= ENV['X'] %> and <%= ENV.fetch('X'[, 'default']) %> are
// evaluated; other tags are an error.
func LoadFile(path string) ([]*Job, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseFile(data)
}

// erbEnv matches the ERB tags gojob evaluates: <%= ENV['X'] %>,
// <%= ENV.fetch('X') %> and <%= ENV.fetch('X', 'default') %>.
var erbEnv = regexp.MustCompile(`<%=\s*ENV(?:\[\s*(['"])(\w+)['"]\s*\]|\.fetch\(\s*(['"])(\w+)['"]\s*(?:,\s*(['"])([^'"]*)['"]\s*)?\))\s*%>`)

// renderERB evaluates the ENV tags of a schedule file, as the gem's ERB
// pass would; any other ERB is an error.
func renderERB(src string, getenv func(string) (string, bool)) (string, error) {
	var missing error
	out := erbEnv.ReplaceAllStringFunc(src, func(tag string) string {
		m := erbEnv.FindStringSubmatch(tag)
		if m[2] != "" { // ENV['X']: nil prints nothing
			v, _ := getenv(m[2])
			return v
		}
		if v, ok := getenv(m[4]); ok {
			return v
		}
		if m[5] != "" {
			return m[6]
		}
		if missing == nil {
			missing = fmt.Errorf("cron schedule: ENV.fetch(%q): the variable is not set", m[4])
		}
		return ""
	})
	if missing != nil {
		return "", missing
	}
	if strings.Contains(out, "<%") {
		return "", fmt.Errorf("cron schedule: gojob evaluates only ENV['X'] and ENV.fetch('X'[, 'default']) ERB tags; render the file first")
	}
	return out, nil
}

// parseFile parses a schedule file's contents (see LoadFile), its ENV ERB
// tags evaluated from the environment.
func parseFile(data []byte) ([]*Job, error) {
	src, err := renderERB(string(data), os.LookupEnv)
	if err != nil {
		return nil, err
	}
	data = []byte(src)
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("cron schedule: %w", err)
	}
	var entries []map[string]any
	switch d := doc.(type) {
	case nil:
		return nil, nil
	case map[string]any:
		for name, v := range d {
			opts, ok := v.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("cron schedule: %s: want a map of options", name)
			}
			opts["name"] = name
			entries = append(entries, opts)
		}
	case []any:
		for i, v := range d {
			opts, ok := v.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("cron schedule: entry %d: want a map of options", i+1)
			}
			entries = append(entries, opts)
		}
	default:
		return nil, fmt.Errorf("cron schedule: not supported format (want a map or a list)")
	}
	var jobs []*Job
	for _, e := range entries {
		j, err := jobFromOptions(e)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

func str(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		return fmt.Sprint(v)
	}
}

// jobFromOptions builds a job as the gem's Job.new does from a hash.
func jobFromOptions(o map[string]any) (*Job, error) {
	name := str(o["name"])
	class := str(o["class"])
	if class == "" {
		class = str(o["klass"])
	}
	queue := str(o["queue"])
	args, err := argsJSON(o["args"])
	if err != nil {
		return nil, fmt.Errorf("cron job %s: args: %w", name, err)
	}
	j, err := newJobJSON(name, str(o["cron"]), class, queue, args)
	if err != nil {
		return nil, err
	}
	j.Source = "schedule"
	j.Description = str(o["description"])
	if s, ok := o["status"]; ok {
		j.Enabled = str(s) == "enabled"
		j.statusSet = true
	}
	j.ActiveJob = parseBool(str(o["active_job"]))
	j.DateAsArgument = parseBool(str(o["date_as_argument"]))
	j.SymbolizeArgs = parseBool(str(o["symbolize_args"]))
	j.QueuePrefix = str(o["queue_name_prefix"])
	j.QueueDelimiter = str(o["queue_name_delimiter"])
	if r, ok := o["retry"]; ok {
		if err := j.setMessageRetry(r); err != nil {
			return nil, err
		}
	}
	if m, ok := o["message"]; ok {
		j.Message = str(m)
	}
	return j, j.validate()
}

// argsJSON turns the args option into the JSON array the gem stores: a
// string is parsed as JSON (or becomes a one-string array), a map becomes
// a one-element array, a list stays, a scalar becomes a one-element array.
func argsJSON(v any) (string, error) {
	var arr []any
	switch a := v.(type) {
	case nil:
		arr = []any{}
	case string:
		// A JSON string is kept as Ruby's JSON parse reads it (1 stays an
		// Integer); anything else becomes a one-string array.
		if parsed, err := rubyjson.Parse([]byte(a)); err == nil {
			if parsed.Kind() != rubyjson.Array {
				parsed = rubyjson.ArrayValue(parsed)
			}
			return string(parsed.Encode()), nil
		}
		arr = []any{a}
	case []any:
		arr = a
	default:
		arr = []any{a}
	}
	val, err := rubyjson.FromGo(arr)
	if err != nil {
		return "", err
	}
	return string(val.Encode()), nil
}
