package sidekiq_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/gojob/gojob/internal/clocktest"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// exampleClient is a client on an in-process Redis with a fixed clock.
func exampleClient() (*sidekiq.Client, func()) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	pool, err := sidekiq.NewPool("redis://" + m.Addr())
	if err != nil {
		panic(err)
	}
	c, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool, Version: wire.Version7, Clock: clocktest.NewFake(time.Unix(1700000000, 0))})
	if err != nil {
		panic(err)
	}
	return c, func() { pool.Close(); m.Close() }
}

// Enqueue is perform_async: HardJob.set(queue: "critical").perform_async(1, "two").
func ExampleClient_Enqueue() {
	c, closeAll := exampleClient()
	defer closeAll()
	res, err := c.Enqueue(context.Background(), "critical", "HardJob", 1, "two")
	if err != nil {
		panic(err)
	}
	job, _ := wire.ParseJob(res.Payload)
	fmt.Println(job.Queue(), job.Class(), len(job.JID()), res.Scheduled)
	// Output:
	// critical HardJob 24 false
}

// PushOpts schedule a job (perform_in) and make it expire (Sidekiq Pro's
// expires_in): expires_at counts from the time the job is due.
func ExamplePushOpts() {
	c, closeAll := exampleClient()
	defer closeAll()
	job, _ := wire.NewJob("DigestJob", 7)
	job.Set("jid", rubyjson.StringValue("0123456789abcdef01234567"))
	res, err := c.Push(context.Background(), job, &sidekiq.PushOpts{In: time.Hour, ExpiresIn: 30 * time.Minute})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Scheduled)
	fmt.Println(string(res.Payload))
	// Output:
	// true
	// {"retry":true,"queue":"default","class":"DigestJob","args":[7],"jid":"0123456789abcdef01234567","created_at":1700000000.0,"expires_at":1700005400.0}
}

// PushBulk is push_bulk: one round trip per thousand jobs.
func ExampleClient_PushBulk() {
	c, closeAll := exampleClient()
	defer closeAll()
	var jobs []*wire.Job
	for i := range 3 {
		j, _ := wire.NewJob("ImportRow", i)
		jobs = append(jobs, j)
	}
	jids, err := c.PushBulk(context.Background(), jobs, nil)
	if err != nil {
		panic(err)
	}
	conn := c.Pool().Get()
	defer conn.Close()
	n, _ := conn.Do("LLEN", "queue:default")
	fmt.Println(len(jids), n)
	// Output:
	// 3 3
}
