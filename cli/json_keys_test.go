package cli

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
)

var snakeKey = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// dataKeys hold user data (a job payload, its args, a port's value), whose
// keys are not ours to name.
var dataKeys = map[string]bool{"payload": true, "args": true, "display_args": true, "state": true, "data": true, "context": true, "default": true}

// checkSnakeKeys fails for any object key of v that is not snake_case.
func checkSnakeKeys(t *testing.T, cmd string, v any, path string) {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		for k, val := range v {
			if !snakeKey.MatchString(k) {
				t.Errorf("%s --json: key %q at %s is not snake_case", cmd, k, path)
			}
			if !dataKeys[k] {
				checkSnakeKeys(t, cmd, val, path+"."+k)
			}
		}
	case []any:
		for _, e := range v {
			checkSnakeKeys(t, cmd, e, path+"[]")
		}
	}
}

// Every --json output uses snake_case keys (stats once printed Go field
// names: Date, Processed, Name).
func TestJSONOutputsUseSnakeCaseKeys(t *testing.T) {
	// Not parallel: see the note on runCLI.
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	url := rs.URL()
	conn, err := rs.Dial()
	require.NoError(t, err)
	defer conn.Close()
	// A process, as a heartbeat writes it, so that processes lists one.
	_, err = conn.Do("SADD", "processes", "host:1:abc")
	require.NoError(t, err)
	_, err = conn.Do("HSET", "host:1:abc", "info", `{"hostname":"host","started_at":1795296573.0,"pid":1,"tag":"t","concurrency":2,"queues":["default"],"labels":[],"identity":"host:1:abc"}`,
		"beat", "1795296573.0", "busy", "0", "quiet", "false", "rss", "1000")
	require.NoError(t, err)
	_, err = conn.Do("EXPIRE", "host:1:abc", 60)
	require.NoError(t, err)
	_, err = conn.Do("ZADD", "retry", "1795296573.0", `{"class":"R","args":[{"CamelKey":1}],"jid":"aaaaaaaaaaaaaaaaaaaaaaaa","queue":"default","error_class":"E","error_message":"m","retry_count":1}`)
	require.NoError(t, err)
	_, err = conn.Do("ZADD", "dead", "1795296573.0", `{"class":"D","args":[],"jid":"bbbbbbbbbbbbbbbbbbbbbbbb","queue":"default"}`)
	require.NoError(t, err)
	db := "sqlite:" + filepath.Join(t.TempDir(), "d.db")

	steps := [][]string{
		{"push", "--json", "HardJob", `{"CamelKey":1}`},
		{"push", "--json", "--in", "1h", "Later"},
		{"push", "--json", "--unique-for", "60", "Once"},
		{"stats", "--json"},
		{"queues", "--json"},
		{"retries", "--json"},
		{"scheduled", "--json"},
		{"dead", "--json"},
		{"processes", "--json"},
		{"quiet", "--json", "host:1:abc"},
		{"retries", "--json", "--class", "R", "--error", "m"},
		{"queue", "jobs", "--json", "default"},
		{"queue", "pause", "--json", "default"},
		{"queue", "unpause", "--json", "default"},
		{"version", "--json"},
		{"retry", "--json", "bbbbbbbbbbbbbbbbbbbbbbbb"},
		{"kill", "--json", "aaaaaaaaaaaaaaaaaaaaaaaa"},
		{"delete", "--json", "aaaaaaaaaaaaaaaaaaaaaaaa"},
		{"retry", "--json", "--all", "--from", "dead"},
		{"queue", "clear", "--json", "--yes", "default"},
		{"cron", "add", "--cron", "0 3 * * *", "--class", "ReportJob", "nightly"},
		{"cron", "list", "--json"},
		{"cron", "run-now", "--json", "nightly"},
		{"sidejob", "tree", "--json"},
		{"durable", "migrate", "--json", "--db", db},
		{"durable", "status", "--json", "--db", db},
		{"durable", "poll", "--json", "--db", db, "--class", "*"},
	}
	checked := 0
	for _, args := range steps {
		words := 1
		if args[0] == "cron" || args[0] == "sidejob" || args[0] == "durable" || args[0] == "queue" {
			words = 2
		}
		full := append([]string{}, args[:words]...)
		if (args[0] != "durable" || args[1] == "poll") && args[0] != "version" {
			full = append(full, "-r", url)
		}
		full = append(full, args[words:]...)
		out, errOut, code := runCLI(t, full...)
		require.Equal(t, 0, code, "%v: %s", args, errOut)
		if out == "" {
			continue
		}
		var v any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			continue // a command without --json in this list
		}
		checkSnakeKeys(t, args[0], v, "$")
		checked++
	}
	require.GreaterOrEqual(t, checked, 18)
	// The duplicate's refusal is JSON too.
	out, _, code := runCLI(t, "push", "-r", url, "--json", "--unique-for", "60", "Once")
	require.Equal(t, exitRefused, code)
	var v any
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	checkSnakeKeys(t, "push", v, "$")
}
