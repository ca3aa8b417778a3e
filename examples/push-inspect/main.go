// Command push-inspect pushes a job the way Ruby's HardJob.perform_async
// would, schedules another, and reads them back through the admin API.
// Run it against any Redis: go run ./examples/push-inspect redis://127.0.0.1:6379/0
// (without an argument: $REDIS_URL, else redis://127.0.0.1:6379/0).
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

func main() {
	ctx := context.Background()
	url := os.Getenv("REDIS_URL") // as every gojob command; "" is redis://127.0.0.1:6379/0
	if len(os.Args) > 1 {
		url = os.Args[1]
	}
	pool, err := sidekiq.NewPool(url)
	check(err)
	defer pool.Close()

	// Write the format of the oldest Sidekiq that reads this Redis.
	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool, Version: wire.Version6})
	check(err)
	res, err := client.Enqueue(ctx, "default", "HardJob", 1, "two", map[string]any{"three": 3.5})
	check(err)
	fmt.Printf("pushed %s: %s\n", res.JID, res.Payload)

	later, err := wire.NewJob("ReportJob", "daily")
	check(err)
	later.Set("retry", rubyjson.IntValue(3))
	_, err = client.Push(ctx, later, &sidekiq.PushOpts{In: time.Hour})
	check(err)

	admin, err := api.New(&api.Config{Pool: pool, Client: client})
	check(err)
	stats, err := admin.Stats(ctx)
	check(err)
	fmt.Printf("enqueued=%d scheduled=%d retries=%d dead=%d\n", stats.Enqueued, stats.Scheduled, stats.Retries, stats.Dead)
	check(admin.ScheduledSet().Each(ctx, func(e *api.SortedEntry) error {
		fmt.Printf("scheduled %s %s at %s\n", e.JID(), e.Class(), e.At().Format(time.RFC3339))
		return nil
	}))
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
