package cli

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	ucli "github.com/urfave/cli/v2"
)

// confirm guards a destructive command: --yes confirms it; on a terminal
// the question is asked; otherwise it is a usage error naming --yes (a
// script must say what it means).
func confirm(c *ucli.Context, question string) error {
	if c.Bool("yes") {
		return nil
	}
	if !stdinInteractive() {
		return usageError(commandPath(c), question+" Add --yes to confirm (stdin is not a terminal).")
	}
	fmt.Fprintf(c.App.ErrWriter, "%s [y/N] ", question)
	line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(line)); a == "y" || a == "yes" {
		return nil
	}
	return ucli.Exit("not confirmed: nothing changed", exitRefused)
}

// stdinInteractive reports whether stdin is a terminal someone can answer
// on: a character device other than the null device (which is one too, and
// is the stdin of cron jobs, systemd units and tests).
func stdinInteractive() bool {
	st, err := os.Stdin.Stat()
	if err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(st, null)
}
