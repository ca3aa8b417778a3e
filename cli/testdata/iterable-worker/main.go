// Command iterable-worker is `gojob` with an iterable Go handler, for
// cli/iterable_test.go, built the way examples/custom-worker is.
//
//   - IterJob [n, log, stopAt]: walks items 0..n-1, appending "item <i>"
//     to log; at item stopAt it appends "waiting at <i>" and waits until
//     its server stops taking jobs (SIGTERM), so that the stop comes
//     mid-walk.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/gojob/gojob/cli"
	"github.com/gojob/gojob/iterable"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintln(f, line)
	return err
}

func main() {
	setup := func(srv *sidekiq.Server) error {
		srv.Handle("IterJob", &iterable.Job[int]{
			Pool: srv.Client().Pool(),
			Each: func(ctx context.Context, job *wire.Job, i int) (int, bool, error) {
				n, _ := job.Args()[0].Int()
				log, _ := job.Args()[1].Str()
				stopAt, _ := job.Args()[2].Int()
				if int64(i) == stopAt {
					if err := appendLine(log, fmt.Sprintf("waiting at %d", i)); err != nil {
						return i, false, err
					}
					<-sidekiq.Stopping(ctx)
				}
				if err := appendLine(log, fmt.Sprintf("item %d", i)); err != nil {
					return i, false, err
				}
				return i + 1, int64(i+1) >= n, nil
			},
		}, nil)
		return nil
	}
	os.Exit(cli.Run(context.Background(), os.Args, os.Stdout, os.Stderr, cli.WithServerSetup(setup)))
}
