package sidekiq_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/clocktest"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Push a job the way Ruby's HardJob.perform_async(1, "two") does. The
// example runs on an in-process Redis and a fixed clock so that its output
// is stable; use sidekiq.NewPool("redis://…") and the default clock in
// a program.
func ExampleClient_Push() {
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

	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{
		Pool:    pool,
		Version: wire.Version7,
		Clock:   clocktest.NewFake(time.Unix(1795296573, 0)),
	})
	if err != nil {
		panic(err)
	}
	job, err := wire.NewJob("HardJob", 1, "two")
	if err != nil {
		panic(err)
	}
	job.Set("jid", rubyjson.StringValue("0123456789abcdef01234567"))
	res, err := client.Push(context.Background(), job, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.JID)
	fmt.Println(string(res.Payload))
	// Output:
	// 0123456789abcdef01234567
	// {"retry":true,"queue":"default","class":"HardJob","args":[1,"two"],"jid":"0123456789abcdef01234567","created_at":1795296573.0,"enqueued_at":1795296573.0}
}

// A server that runs HardJob with a Go handler. A failed job would go
// through Sidekiq's retry algorithm; return sidekiq.Discard(err),
// sidekiq.Kill(err) or sidekiq.RetryIn(d, err) to decide otherwise.
func ExampleServer() {
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

	srv, err := sidekiq.NewServer(&sidekiq.ServerConfig{
		Pool:          pool,
		Queues:        []wire.QueueWeight{{Name: "default"}},
		Concurrency:   2,
		DisablePoller: true,
	})
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	srv.Handle("HardJob", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		fmt.Println("HardJob", job.JID(), string(job.Args()[1].Encode()))
		close(done)
		return nil
	}), nil)
	ctx := context.Background()
	if err := srv.Start(ctx); err != nil {
		panic(err)
	}
	client := srv.Client()
	job, _ := wire.NewJob("HardJob", 1, "two")
	job.Set("jid", rubyjson.StringValue("0123456789abcdef01234567"))
	if _, err := client.Push(ctx, job, nil); err != nil {
		panic(err)
	}
	<-done
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := srv.Stop(stopCtx); err != nil {
		panic(err)
	}
	conn := pool.Get()
	defer conn.Close()
	processed, _ := redis.Int(conn.Do("GET", "stat:processed"))
	fmt.Println("processed", processed)
	// Output:
	// HardJob 0123456789abcdef01234567 "two"
	// processed 1
}
