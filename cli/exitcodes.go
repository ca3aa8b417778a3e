package cli

import (
	"fmt"
	"strings"

	ucli "github.com/urfave/cli/v2"
)

// gojob's exit codes, one table for every command (docs/cli.md "Exit codes",
// printed by `gojob --help`). A script can tell "Redis is down" (retry
// later) from "you typed it wrong" (fix the command) from "there is no such
// thing" (nothing to do) from "refused" (the state does not allow it).
const (
	// exitOK: done.
	exitOK = 0
	// exitFailed: any failure not listed below (a Redis error mid-command,
	// a database error, a shutdown that finished with errors).
	exitFailed = 1
	// exitUsage: unknown command or flag, missing or bad argument or value,
	// a destructive command (queue clear, delete --all) without --yes when
	// stdin is not a terminal.
	exitUsage = 2
	// exitUnreachable: cannot reach Redis.
	exitUnreachable = 3
	// exitNotFound: no such job, queue, process identity, cron job, SideJob
	// job, batch, or no durable_jobs table yet (run gojob durable migrate).
	exitNotFound = 4
	// exitRefused: the state does not allow it: a unique lock holds the job
	// (push --unique-for), the address gojob dev wants is taken, a SideJob
	// job that is not terminated (sidejob delete), a batch that has
	// completed (push --batch), a confirmation answered no.
	exitRefused = 5
)

// exitCodeHelp is the table `gojob --help` prints.
const exitCodeHelp = `EXIT CODES:
   0  done
   1  failed (an error not listed here: a Redis or database error mid-command, …)
   2  usage: unknown command or flag, missing or bad argument or value, queue clear or delete --all without --yes off a terminal
   3  cannot reach Redis
   4  not found: job, queue, process identity, cron job, SideJob job, batch, durable table (run gojob durable migrate)
   5  refused: a unique lock holds the job, gojob dev's address is taken, a SideJob job is not terminated, a completed batch, a confirmation answered no

ENVIRONMENT:
   REDIS_URL  the Redis every command uses unless given -r/--redis (default redis://127.0.0.1:6379/0)
`

// appHelpTemplate is urfave/cli's app help with the exit codes at the end.
var appHelpTemplate = ucli.AppHelpTemplate + "\n" + exitCodeHelp

// usageError is a usage error with a one-line hint, for stderr.
func usageError(cmd, msg string) error {
	if strings.HasPrefix(msg, "flag provided but not defined") {
		msg += " (put arguments that start with - after --)"
	}
	return ucli.Exit(fmt.Sprintf("%s\nRun '%s --help' for usage.", msg, cmd), exitUsage)
}

// applyUsageConventions makes every command report a bad flag as a usage
// error (exit 2, the error and a one-line hint on stderr; urfave/cli
// otherwise prints the whole help on stdout and exits 1), and every command
// with subcommands refuse an unknown one (urfave/cli exits 3, the code of
// an unreachable Redis).
func applyUsageConventions(app *ucli.App) {
	app.OnUsageError = func(c *ucli.Context, err error, _ bool) error {
		return usageError(c.App.Name, err.Error())
	}
	app.Action = func(c *ucli.Context) error {
		if !c.Args().Present() {
			return ucli.ShowAppHelp(c)
		}
		return unknownSubcommand(app.Name)(c)
	}
	var walk func(prefix string, cmds []*ucli.Command)
	walk = func(prefix string, cmds []*ucli.Command) {
		for _, cmd := range cmds {
			name := prefix + " " + cmd.Name
			cmd.OnUsageError = func(c *ucli.Context, err error, _ bool) error {
				return usageError(name, err.Error())
			}
			if len(cmd.Subcommands) > 0 {
				if cmd.Action == nil {
					cmd.Action = unknownSubcommand(name)
				}
				walk(name, cmd.Subcommands)
			}
		}
	}
	walk(app.Name, app.Commands)
}

// unknownSubcommand is the action of a command that only has subcommands:
// with no argument it shows the help; with one it does not know, it is a
// usage error.
func unknownSubcommand(cmd string) ucli.ActionFunc {
	return func(c *ucli.Context) error {
		if !c.Args().Present() {
			return ucli.ShowSubcommandHelp(c)
		}
		name := c.Args().First()
		if strings.HasPrefix(name, "-") {
			return usageError(cmd, "unknown flag "+name)
		}
		return usageError(cmd, fmt.Sprintf("unknown command %q", name))
	}
}
