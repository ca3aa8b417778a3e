package cli

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Usage errors exit 2 with the error and a one-line hint on stderr and
// nothing on stdout, wherever they happen: an unknown command or
// subcommand, an unknown flag, bad values, checked before Redis is
// reached (the Redis here does not exist, which would be exit 3).
func TestUsageErrorsExit2WithAOneLineHint(t *testing.T) {
	// Not parallel: see the note on runCLI.
	const nowhere = "redis://127.0.0.1:1/0"
	for _, c := range []struct {
		args []string
		err  string
		hint string
	}{
		{[]string{"nosuch"}, `unknown command "nosuch"`, "gojob --help"},
		{[]string{"help", "nosuch"}, `unknown command "nosuch"`, "gojob --help"},
		{[]string{"--bogus"}, "flag provided but not defined: -bogus", "gojob --help"},
		{[]string{"stats", "--bogus"}, "flag provided but not defined: -bogus", "gojob stats --help"},
		{[]string{"queue", "nosuch"}, `unknown command "nosuch"`, "gojob queue --help"},
		{[]string{"sidejob", "nosuch"}, `unknown command "nosuch"`, "gojob sidejob --help"},
		{[]string{"cron", "list", "--bogus"}, "flag provided but not defined: -bogus", "gojob cron list --help"},
		{[]string{"cron", "add", "-r", nowhere, "--class", "X", "nightly"}, "--cron is required", "gojob cron add --help"},
		{[]string{"stats", "--days", "x"}, `invalid value "x" for flag -days`, "gojob stats --help"},
		{[]string{"push", "-r", nowhere, "-q", "", "X"}, "must have a valid queue name", ""},
		{[]string{"push", "-r", nowhere}, "push: CLASS is required", ""},
		{[]string{"retries", "-r", nowhere, "--limit", "-1"}, "--limit -1: want at least 1", "gojob retries --help"},
		{[]string{"scheduled", "-r", nowhere, "--offset", "-1"}, "--offset -1: want 0 or more", "gojob scheduled --help"},
	} {
		out, errOut, code := runCLI(t, c.args...)
		require.Equal(t, exitUsage, code, "%v: %s", c.args, errOut)
		require.Empty(t, out, c.args)
		require.Contains(t, errOut, c.err, c.args)
		require.NotContains(t, errOut, "PageParams", c.args)
		require.NotContains(t, errOut, "USAGE", c.args)
		if c.hint != "" {
			require.Contains(t, errOut, "Run '"+c.hint+"' for usage.", c.args)
		}
		require.LessOrEqual(t, strings.Count(errOut, "\n"), 2, "%v: %s", c.args, errOut)
	}
	// An unreachable Redis is 3, and only that.
	_, errOut, code := runCLI(t, "stats", "-r", "redis://127.0.0.1:1/0")
	require.Equal(t, exitUnreachable, code, errOut)
}

// gojob --help ends with the exit-code table; --version, -v and gojob
// version print the version.
func TestHelpShowsExitCodesAndVersion(t *testing.T) {
	// Not parallel: see the note on runCLI.
	out, _, code := runCLI(t, "--help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "EXIT CODES:")
	for n, meaning := range map[int]string{2: "usage", 3: "cannot reach Redis", 4: "not found", 5: "refused"} {
		require.Contains(t, out, fmt.Sprintf("   %d  %s", n, meaning))
	}
	require.Contains(t, out, "REDIS_URL")
	for _, args := range [][]string{{"--version"}, {"-v"}, {"version"}} {
		out, errOut, code := runCLI(t, args...)
		require.Equal(t, 0, code, errOut)
		require.Equal(t, "gojob version "+versionString()+"\n", out, args)
	}
	// The real binary, built from a checkout.
	out2, err := exec.Command(gojobBinary(t), "--version").Output()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(out2), "gojob version "), string(out2))
}

// gojob durable status before migrate says which command creates the
// table, and exits 4 (not found) rather than 1.
func TestDurableStatusBeforeMigrateHintsAtMigrate(t *testing.T) {
	// Not parallel: see the note on runCLI.
	db := "sqlite:" + t.TempDir() + "/d.db"
	out, errOut, code := runCLI(t, "durable", "status", "--db", db)
	require.Equal(t, exitNotFound, code, errOut)
	require.Contains(t, out, "gojob durable migrate")
	require.Contains(t, errOut, "run gojob durable migrate")
	_, errOut, code = runCLI(t, "durable", "migrate", "--db", db)
	require.Equal(t, 0, code, errOut)
	_, errOut, code = runCLI(t, "durable", "status", "--db", db)
	require.Equal(t, 0, code, errOut)
}
