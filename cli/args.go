package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	ucli "github.com/urfave/cli/v2"
)

// interspersed rewrites a command line so that flags may come anywhere
// after the command, as Go and GNU tools accept them: `gojob push MyJob 1
// -q mail` is parsed as `gojob push -q mail -- MyJob 1`. urfave/cli v2
// parses with Go's flag package, which stops at the first argument; without
// this, every word after it would become a job argument.
//
// A word after `--` is an argument even if it starts with `-`; so is a
// lone `-` and a negative number (`gojob push X -1`) unless the command
// defines a flag of that name. An unknown flag-looking word stays a flag,
// so the parser reports it as a usage error (exit 2), never as data.
//
// The global -r/--redis before the command (`gojob -r URL stats`) moves to
// the command when it has a --redis flag; a --redis given to the command
// itself still wins.
func interspersed(app *ucli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	var global []string // -r URL given before the command
	i := 1
	for i < len(args) && strings.HasPrefix(args[i], "-") && args[i] != "-" && args[i] != "--" {
		name, hasValue := flagName(args[i])
		if name == "r" || name == "redis" {
			global = append(global, args[i])
			if !hasValue && i+1 < len(args) {
				global = append(global, args[i+1])
				i++
			}
			i++
			continue
		}
		out = append(out, args[i])
		i++
	}
	// Walk the command path: gojob CMD [SUB...]. Flags between a command
	// and its subcommand (`gojob cron -r URL list`) are the subcommand's:
	// they are set aside and parsed after it.
	var leaf *ucli.Command
	var deferred []string
	cmds := app.Commands
	for i < len(args) {
		cmd := findCommand(cmds, args[i])
		if cmd == nil {
			break
		}
		out = append(out, args[i])
		i++
		leaf = cmd
		if len(cmd.Subcommands) == 0 {
			break
		}
		cmds = cmd.Subcommands
		takes := subcommandFlags(cmd)
		j := i
		var words []string
		for j < len(args) && strings.HasPrefix(args[j], "-") && args[j] != "-" && args[j] != "--" {
			words = append(words, args[j])
			name, hasValue := flagName(args[j])
			j++
			if takes[name] && !hasValue && j < len(args) {
				words = append(words, args[j])
				j++
			}
		}
		if len(words) > 0 && j < len(args) && findCommand(cmds, args[j]) != nil {
			deferred = append(deferred, words...)
			i = j
		}
	}
	if len(deferred) > 0 {
		args = append(append(append([]string{}, args[:i]...), deferred...), args[i:]...)
	}
	if leaf == nil {
		// No command we know (help, a typo): the parser says what is wrong;
		// -r stays global.
		return append(append(out[:1:1], global...), append(out[1:], args[i:]...)...)
	}
	takesValue := commandFlags(leaf)
	var flags, positional []string
	if _, ok := takesValue["redis"]; ok {
		flags = append(flags, global...)
	} else if len(global) > 0 {
		out = append(append(out[:1:1], global...), out[1:]...)
	}
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			positional = append(positional, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			positional = append(positional, a)
			continue
		}
		name, hasValue := flagName(a)
		takes, known := takesValue[name]
		if !known {
			if _, err := strconv.ParseFloat(a, 64); err == nil {
				positional = append(positional, a) // a negative number
				continue
			}
		}
		flags = append(flags, a)
		if known && takes && !hasValue && i+1 < len(args) {
			flags = append(flags, args[i+1])
			i++
		}
	}
	out = append(out, flags...)
	if len(positional) > 0 {
		out = append(out, "--")
		out = append(out, positional...)
	}
	return out
}

// flagName returns the name of a flag word (-q, --queue, --queue=mail) and
// whether the word carries its value.
func flagName(a string) (string, bool) {
	name := strings.TrimLeft(a, "-")
	name, _, hasValue := strings.Cut(name, "=")
	return name, hasValue
}

// findCommand returns the command of cmds named (or aliased) name.
func findCommand(cmds []*ucli.Command, name string) *ucli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// subcommandFlags maps every flag name of cmd's subcommands, at any depth,
// to whether the flag takes a value (true when any of them does).
func subcommandFlags(cmd *ucli.Command) map[string]bool {
	m := map[string]bool{}
	for _, sub := range cmd.Subcommands {
		for n, takes := range commandFlags(sub) {
			m[n] = m[n] || takes
		}
		for n, takes := range subcommandFlags(sub) {
			m[n] = m[n] || takes
		}
	}
	return m
}

// commandFlags maps every name of cmd's flags (and help's) to whether the
// flag takes a value.
func commandFlags(cmd *ucli.Command) map[string]bool {
	m := map[string]bool{"h": false, "help": false}
	for _, f := range cmd.Flags {
		takes := true
		if df, ok := f.(ucli.DocGenerationFlag); ok {
			takes = df.TakesValue()
		}
		for _, n := range f.Names() {
			m[n] = takes
		}
	}
	return m
}

// checkPageFlags refuses a --limit or --offset the listing cannot take, as
// a usage error and before Redis is reached.
func checkPageFlags(c *ucli.Context) error {
	if c.Int("limit") < 1 {
		return usageError(commandPath(c), fmt.Sprintf("--limit %d: want at least 1", c.Int("limit")))
	}
	if c.Int("offset") < 0 {
		return usageError(commandPath(c), fmt.Sprintf("--offset %d: want 0 or more", c.Int("offset")))
	}
	return nil
}

// commandPath is "gojob queue jobs" for a context of that command.
func commandPath(c *ucli.Context) string {
	var names []string
	for _, l := range c.Lineage() {
		if l.Command != nil && l.Command.Name != "" && l.Command.Name != c.App.Name {
			names = append(names, l.Command.Name)
		}
	}
	slices.Reverse(names)
	return strings.Join(append([]string{"gojob"}, names...), " ")
}

// oneArg checks, before Redis is reached, that the command got exactly
// one non-empty argument.
func oneArg(cmd, what string) ucli.BeforeFunc {
	return func(c *ucli.Context) error {
		if c.NArg() != 1 || c.Args().First() == "" {
			name := cmd[len("gojob "):]
			return usageError(cmd, fmt.Sprintf("%s: one %s is required", name, what))
		}
		return nil
	}
}
