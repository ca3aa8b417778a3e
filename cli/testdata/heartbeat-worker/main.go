// Command heartbeat-worker is `gojob` with the Go handlers of the heartbeat
// tests (cli/heartbeat_test.go), built the way examples/custom-worker is.
//
//   - GoBeat [n, log]: heartbeats n times, 100 ms apart, appends
//     "<jid> <epoch seconds of the last heartbeat>" to log, then waits for
//     its cancellation.
//   - GoHang [log]: appends "<jid> started" to log and sleeps for an hour,
//     ignoring its cancellation.
//   - GoNext [log]: appends "<jid> ran" to log.
//   - GoForever [log]: appends "<jid> started <pid>" to log and heartbeats
//     every 50 ms until its cancellation.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/gojob/gojob/cli"
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

func arg(job *wire.Job, i int) any { return job.Args()[i].Interface() }

func goBeat(ctx context.Context, job *wire.Job) error {
	n, _ := job.Args()[0].Int()
	log := arg(job, 1).(string)
	for i := int64(0); i < n; i++ {
		if err := sidekiq.Heartbeat(ctx); err != nil {
			return err
		}
		if i < n-1 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if err := appendLine(log, fmt.Sprintf("%s %.6f", job.JID(), float64(time.Now().UnixNano())/1e9)); err != nil {
		return err
	}
	<-ctx.Done()
	return context.Cause(ctx)
}

func goHang(ctx context.Context, job *wire.Job) error {
	if err := appendLine(arg(job, 0).(string), job.JID()+" started"); err != nil {
		return err
	}
	time.Sleep(time.Hour)
	return nil
}

func goNext(ctx context.Context, job *wire.Job) error {
	return appendLine(arg(job, 0).(string), job.JID()+" ran")
}

func goForever(ctx context.Context, job *wire.Job) error {
	if err := appendLine(arg(job, 0).(string), fmt.Sprintf("%s started %d", job.JID(), os.Getpid())); err != nil {
		return err
	}
	for sidekiq.Heartbeat(ctx) == nil {
		time.Sleep(50 * time.Millisecond)
	}
	return context.Cause(ctx)
}

func main() {
	os.Exit(cli.Run(context.Background(), os.Args, os.Stdout, os.Stderr,
		cli.WithHandler("GoBeat", sidekiq.HandlerFunc(goBeat), nil),
		cli.WithHandler("GoHang", sidekiq.HandlerFunc(goHang), nil),
		cli.WithHandler("GoNext", sidekiq.HandlerFunc(goNext), nil),
		cli.WithHandler("GoForever", sidekiq.HandlerFunc(goForever), nil)))
}
