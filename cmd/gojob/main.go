// Command gojob runs and inspects Sidekiq jobs from Go. See `gojob help`.
//
// It is the cli package's commands plus `gojob bench` (internal/bench under cmd/gojob),
// which only this binary carries: a program built on cli gets the runtime
// commands without the benchmark.
package main

import (
	"context"
	"os"

	"github.com/gojob/gojob/cli"
	"github.com/gojob/gojob/cmd/gojob/internal/bench"
)

func main() {
	os.Exit(cli.Run(context.Background(), os.Args, os.Stdout, os.Stderr, cli.WithCommand(bench.Command()), cli.WithCommand(bench.WorkerCommand())))
}
