// Command gojob runs and inspects Sidekiq jobs from Go. See `gojob help`.
package main

import (
	"context"
	"os"

	"github.com/gojob/gojob/cli"
)

func main() {
	os.Exit(cli.Run(context.Background(), os.Args, os.Stdout, os.Stderr))
}
