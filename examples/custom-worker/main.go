// Command custom-worker is gojob's CLI with Go handlers of your own: build
// it, then run `custom-worker work -q default` (or `custom-worker dev`).
// Every other gojob command works unchanged.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/gojob/gojob/cli"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

func hardJob(ctx context.Context, job *wire.Job) error {
	fmt.Println("HardJob", job.JID(), string(job.Encode()))
	return nil
}

func main() {
	os.Exit(cli.Run(context.Background(), os.Args, os.Stdout, os.Stderr,
		cli.WithHandler("HardJob", sidekiq.HandlerFunc(hardJob), nil)))
}
