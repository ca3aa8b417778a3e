// Command custom-worker is gojob's CLI with Go handlers of your own: build
// it, then run `custom-worker work -q default` (or `custom-worker dev`).
// Every other gojob command works unchanged.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/gojob/gojob/cli"
	"github.com/gojob/gojob/sidekiq/typed"
	"github.com/gojob/gojob/sidekiq/wire"
)

// HardJobArgs are Ruby's HardJob#perform(name, count) (docs/go.md).
type HardJobArgs struct {
	typed.Positional
	Name  string
	Count int
}

func hardJob(ctx context.Context, job *wire.Job, a HardJobArgs) error {
	fmt.Println("HardJob", job.JID(), a.Name, a.Count)
	return nil
}

func main() {
	os.Exit(cli.Run(context.Background(), os.Args, os.Stdout, os.Stderr,
		cli.WithHandler("HardJob", typed.Handler(hardJob), nil)))
}
