// Command orderedworker is the gojob command line with one Go handler,
// OrderedProbe, for the ordered-queue crash test (cli/ordered_test.go).
// Each job's args are [key, index]; the handler appends "s KEY INDEX PID"
// at its start and "e KEY INDEX PID" at its end to the file named by
// GOJOB_ORDER_LOG (single O_APPEND writes, so lines of concurrent
// processes never mix and the file's order is the order of events), and
// sleeps a random 0-1 ms between them.
package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gojob/gojob/cli"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	f, err := os.OpenFile(os.Getenv("GOJOB_ORDER_LOG"), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	pid := os.Getpid()
	probe := sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		key, _ := job.Args()[0].Str()
		i, _ := job.Args()[1].Int()
		if _, err := fmt.Fprintf(f, "s %s %d %d\n", key, i, pid); err != nil {
			return err
		}
		time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
		_, err := fmt.Fprintf(f, "e %s %d %d\n", key, i, pid)
		return err
	})
	os.Exit(cli.Run(ctx, os.Args, os.Stdout, os.Stderr, cli.WithHandler("OrderedProbe", probe, nil)))
}
