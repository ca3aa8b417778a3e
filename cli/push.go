package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/orderedstore"
	"github.com/gojob/gojob/ordered"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

func pushAction(ctx context.Context, e *adminEnv) error {
	if e.c.Args().First() == "-" {
		return pushLinesAction(ctx, e)
	}
	job, opts, err := pushJobFromFlags(e.c)
	if err != nil {
		return err
	}
	if e.c.IsSet("key") {
		return pushOrdered(ctx, e, job)
	}
	stopTracing, err := setupTracing(ctx, newLogger(e.c.App.ErrWriter, false, "warn"), e.api.Client())
	if err != nil {
		return err
	}
	defer stopTracing()
	if e.c.Bool("durable") {
		d, err := openPushDurable(ctx, e.c, newLogger(e.c.App.ErrWriter, false, "warn"), job.Class())
		if err != nil {
			return err
		}
		defer d.Close()
		e.api.Client().Extend(d)
	}
	if e.c.IsSet("batch") {
		return pushToBatch(ctx, e, job, opts)
	}
	res, err := e.api.Client().Push(ctx, job, opts)
	if err != nil {
		if strings.Contains(err.Error(), "unique_") || errors.Is(err, wire.ErrInvalidJob) {
			return ucli.Exit("push: "+err.Error(), exitUsage)
		}
		return err
	}
	if res.Duplicate {
		if e.json {
			e.printJSON(map[string]any{"jid": "", "duplicate": true, "lock": contract.UniqueKey(job)})
			return ucli.Exit("", exitRefused)
		}
		return ucli.Exit(fmt.Sprintf("not pushed: a %s job with these arguments on queue %s holds the unique lock %s",
			job.Class(), job.Queue(), contract.UniqueKey(job)), exitRefused)
	}
	if e.json {
		return e.printJSON(map[string]any{"jid": res.JID, "scheduled": res.Scheduled, "payload": json.RawMessage(res.Payload)})
	}
	where := "queue " + job.Queue()
	if res.Scheduled {
		where = "the schedule set"
	}
	fmt.Fprintf(e.out, "pushed %s to %s\n", res.JID, where)
	return nil
}

// pushOrdered is gojob push --key K: the job goes to the ordered queue.
func pushOrdered(ctx context.Context, e *adminEnv, job *wire.Job) error {
	if e.c.IsSet("in") || e.c.IsSet("at") || e.c.IsSet("unique-for") || e.c.IsSet("retry") {
		return ucli.Exit("push: --key takes no --in, --at, --unique-for or --retry (ordered queues retry per key)", 2)
	}
	client, err := ordered.NewClient(&ordered.ClientConfig{Pool: e.pool, Shards: e.c.Int("shards")})
	if err != nil {
		return ucli.Exit("push: "+err.Error(), 2)
	}
	opts := &ordered.PushOpts{Key: e.c.String("key")}
	if e.c.IsSet("score") {
		s := e.c.Float64("score")
		opts.Score = &s
	}
	added, err := client.Push(ctx, job, opts)
	if err != nil {
		if errors.Is(err, orderedstore.ErrBadQueueName) {
			return ucli.Exit("push: "+err.Error(), 2)
		}
		return err
	}
	if e.json {
		return e.printJSON(map[string]any{"queue": job.Queue(), "key": opts.Key, "added": added})
	}
	if added == 0 {
		fmt.Fprintf(e.out, "merged into key %s of ordered queue %s (an equal job was pending)\n", opts.Key, job.Queue())
		return nil
	}
	fmt.Fprintf(e.out, "pushed to key %s of ordered queue %s\n", opts.Key, job.Queue())
	return nil
}

// checkBatchPush refuses, before Redis is reached, the push flags a batch
// push does not take.
func checkBatchPush(c *ucli.Context) error {
	if !c.IsSet("batch") {
		return nil
	}
	if c.String("batch") == "" {
		return ucli.Exit("push: --batch needs a BID", exitUsage)
	}
	for _, f := range []string{"in", "at", "key", "unique-for", "unique-until"} {
		if c.IsSet(f) {
			return ucli.Exit(fmt.Sprintf("push: --batch takes no --%s (batch jobs are pushed now, as plain jobs)", f), exitUsage)
		}
	}
	return nil
}

// pushToBatch is push --batch.
func pushToBatch(ctx context.Context, e *adminEnv, job *wire.Job, _ *sidekiq.PushOpts) error {
	b, err := newBatches(e)
	if err != nil {
		return err
	}
	bid := e.c.String("batch")
	jid, ok, err := b.Push(ctx, bid, job)
	if err != nil {
		if errors.Is(err, wire.ErrInvalidJob) {
			return ucli.Exit("push: "+err.Error(), exitUsage)
		}
		return batchError(err)
	}
	if !ok {
		return ucli.Exit("push: a client middleware stopped the push", exitRefused)
	}
	if e.json {
		return e.printJSON(map[string]any{"jid": jid, "batch": bid, "payload": json.RawMessage(job.Bytes())})
	}
	fmt.Fprintf(e.out, "pushed %s to queue %s in batch %s\n", jid, job.Queue(), bid)
	return nil
}
