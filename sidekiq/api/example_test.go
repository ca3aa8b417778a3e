package api_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Read the dashboard numbers and list the scheduled jobs, as the Web UI
// does. The example runs on an in-process Redis.
func ExampleAPI() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	pool, err := sidekiq.NewPool("redis://" + m.Addr())
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	ctx := context.Background()
	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool})
	if err != nil {
		panic(err)
	}
	if _, err := client.Enqueue(ctx, "default", "HardJob", 1); err != nil {
		panic(err)
	}
	later, _ := wire.NewJob("ReportJob", "daily")
	if _, err := client.Push(ctx, later, &sidekiq.PushOpts{In: time.Hour}); err != nil {
		panic(err)
	}

	admin, err := api.New(&api.Config{Pool: pool, Client: client})
	if err != nil {
		panic(err)
	}
	stats, err := admin.Stats(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("enqueued=%d scheduled=%d retries=%d dead=%d\n", stats.Enqueued, stats.Scheduled, stats.Retries, stats.Dead)
	err = admin.ScheduledSet().Each(ctx, func(e *api.SortedEntry) error {
		fmt.Println("scheduled", e.Class(), string(e.Args()[0].Encode()))
		return nil
	})
	if err != nil {
		panic(err)
	}
	// Output:
	// enqueued=1 scheduled=1 retries=0 dead=0
	// scheduled ReportJob "daily"
}
