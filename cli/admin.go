package cli

import ucli "github.com/urfave/cli/v2"

// adminCommands returns the commands built on the admin API.
func adminCommands() []*ucli.Command { return nil }
