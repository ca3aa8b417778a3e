package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
)

func TestInterspersedMovesFlagsBeforeArguments(t *testing.T) {
	t.Parallel()
	app := newApp(nil, nil, nil)
	for _, c := range []struct{ in, want string }{
		{"push MyJob 1 -q mail", "push -q mail -- MyJob 1"},
		{"push X 1 --retry 0", "push --retry 0 -- X 1"},
		{"push X 1 --queue=mail --json", "push --queue=mail --json -- X 1"},
		{"push X -1 -2.5", "push -- X -1 -2.5"},
		{"push X -- -q --json", "push -- X -q --json"},
		{"push X - --bogus", "push --bogus -- X -"},
		{"delete JID --json", "delete --json -- JID"},
		{"cron add x --cron * --class X", "cron add --cron * --class X -- x"},
		{"queue pause mail -r U", "queue pause -r U -- mail"},
		{"-r U stats", "stats -r U"},
		{"--redis=U stats --json", "stats --redis=U --json"},
		{"-r U stats -r V", "stats -r U -r V"},
		{"-r U version", "-r U version"},
		{"-r U nosuch a -b", "-r U nosuch a -b"},
		{"stats", "stats"},
		{"--help", "--help"},
		{"help push", "help push"},
		{"work -c 2 -q a -q b", "work -c 2 -q a -q b"},
		// Flags between a command and its subcommand are the subcommand's.
		{"cron -r U list", "cron list -r U"},
		{"cron -r U --json list", "cron list -r U --json"},
		{"cron --redis=U add x --cron *", "cron add --redis=U --cron * -- x"},
		{"-r U cron -r V list", "cron list -r U -r V"},
		{"queue -r U pause mail", "queue pause -r U -- mail"},
		{"batch --json -r U status B", "batch status --json -r U -- B"},
		{"cron -r U", "cron -r -- U"}, // no subcommand: the parser reports -r
	} {
		got := interspersed(app, append([]string{"gojob"}, strings.Fields(c.in)...))
		require.Equal(t, c.want, strings.Join(got[1:], " "), c.in)
	}
}

// The flags of the push line are flags wherever they stand; a word after
// -- is an argument; -r may come before the command.
func TestFlagsAnywhereOnTheLine(t *testing.T) {
	// Not parallel: see the note on runCLI.
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	url := srv.URL()
	conn := srv.Pool(t).Get()
	defer conn.Close()

	out, errOut, code := runCLI(t, "push", "MyJob", "1", "-q", "mail", "-r", url, "--json")
	require.Equal(t, exitOK, code, errOut)
	var pushed struct {
		JID     string `json:"jid"`
		Payload struct {
			Queue string `json:"queue"`
			Args  []any  `json:"args"`
			Retry any    `json:"retry"`
		} `json:"payload"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &pushed), out)
	require.Equal(t, "mail", pushed.Payload.Queue)
	require.Equal(t, []any{1.0}, pushed.Payload.Args)
	n, err := redis.Int(conn.Do("LLEN", "queue:mail"))
	require.NoError(t, err)
	require.Equal(t, 1, n)

	out, errOut, code = runCLI(t, "-r", url, "push", "X", "1", "--retry", "0", "--json", "--", "-q", "--json")
	require.Equal(t, exitOK, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &pushed), out)
	require.Equal(t, []any{1.0, "-q", "--json"}, pushed.Payload.Args)
	require.EqualValues(t, 0, pushed.Payload.Retry)
	require.Equal(t, "default", pushed.Payload.Queue)

	out, errOut, code = runCLI(t, "-r", url, "stats", "--json")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, `"enqueued": 2`)

	// An unknown flag after the arguments is a usage error, never data.
	_, errOut, code = runCLI(t, "push", "X", "1", "--bogus", "-r", url)
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "after --")

	_, errOut, code = runCLI(t, "push", "-r", url, "Later", "--in", "1h")
	require.Equal(t, exitOK, code, errOut)
	out, errOut, code = runCLI(t, "scheduled", "-r", url, "--json")
	require.Equal(t, exitOK, code, errOut)
	var sched struct {
		Entries []struct{ JID string } `json:"entries"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &sched))
	require.Len(t, sched.Entries, 1)
	out, errOut, code = runCLI(t, "delete", sched.Entries[0].JID, "--json", "-r", url)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, `"action": "delete"`)
	_, errOut, code = runCLI(t, "delete", "nope", "--json", "-r", url)
	require.Equal(t, exitNotFound, code, errOut)

	_, errOut, code = runCLI(t, "cron", "add", "nightly", "--cron", "0 3 * * *", "--class", "X", "-r", url, "--cron-layout", "v2")
	require.Equal(t, exitOK, code, errOut)
	out, errOut, code = runCLI(t, "cron", "list", "-r", url)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "nightly")
}

func TestVersionJSON(t *testing.T) {
	// Not parallel: see the note on runCLI.
	out, errOut, code := runCLI(t, "version", "--json")
	require.Equal(t, exitOK, code, errOut)
	var v map[string]string
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	require.NotEmpty(t, v["version"])
	require.NotEmpty(t, v["go"])
}
