package sidekiqtest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/sidekiqtest"
	"github.com/gojob/gojob/sidekiq/typed"
	"github.com/gojob/gojob/sidekiq/wire"
)

// exampleClient is a client on an in-process Redis. In a test,
// sidekiqtest.NewFake(t) makes one for you.
func exampleClient() (*sidekiq.Client, func()) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	pool, err := sidekiq.NewPool("redis://" + m.Addr())
	if err != nil {
		panic(err)
	}
	c, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool})
	if err != nil {
		panic(err)
	}
	return c, func() { pool.Close(); m.Close() }
}

// Fake mode captures pushes (Sidekiq::Testing.fake!). In a test:
//
//	f := sidekiqtest.NewFake(t)
//	signup(ctx, f.Client(), 7)
//	sidekiqtest.RequirePushed(t, f, "WelcomeMailJob", &sidekiqtest.Want{Args: []any{Welcome{UserID: 7}}, Queue: "mailers"})
func ExampleNewFake() {
	c, closeAll := exampleClient()
	defer closeAll()
	f := sidekiqtest.New(c)

	ctx := context.Background()
	welcome, _ := typed.NewJob("WelcomeMailJob", Welcome{UserID: 7, Locale: "nb"})
	welcome.SetQueue("mailers")
	f.Client().Push(ctx, welcome, nil)
	j, _ := wire.NewJob("RemindJob", 7)
	f.Client().Push(ctx, j, &sidekiq.PushOpts{In: time.Hour})

	for _, j := range f.Jobs("") {
		args, _ := j.Get("args")
		fmt.Println(j.Class(), j.Queue(), string(args.Encode()), j.Has("at"))
	}
	// Output:
	// WelcomeMailJob mailers [{"user_id":7,"locale":"nb"}] false
	// RemindJob default [7] true
}

// Drain runs the captured jobs through the handlers, and the jobs they
// push (Sidekiq::Worker.drain_all).
func ExampleFake_Drain() {
	c, closeAll := exampleClient()
	defer closeAll()
	f := sidekiqtest.New(c)
	f.Handle("WelcomeMailJob", typed.Handler(func(ctx context.Context, job *wire.Job, w Welcome) error {
		fmt.Println("welcome", w.UserID)
		audit, _ := typed.NewJob("AuditJob", "welcome sent")
		_, err := f.Client().Push(ctx, audit, nil)
		return err
	}))
	f.Handle("AuditJob", typed.Handler(func(ctx context.Context, job *wire.Job, note string) error {
		fmt.Println("audit:", note)
		return nil
	}))
	ctx := context.Background()
	welcome, _ := typed.NewJob("WelcomeMailJob", Welcome{UserID: 7})
	f.Client().Push(ctx, welcome, nil)
	fmt.Println("before drain:", len(f.Jobs("")), "pushed")
	if err := f.Drain(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// before drain: 1 pushed
	// welcome 7
	// audit: welcome sent
}

// Inline mode runs a job's handler during its push
// (Sidekiq::Testing.inline!); the handler's error is the push's. In a
// test, set Inline on the Fake NewFake(t) returns.
func ExampleFake_inline() {
	c, closeAll := exampleClient()
	defer closeAll()
	f := sidekiqtest.New(c)
	f.Inline = true
	f.Handle("WelcomeMailJob", typed.Handler(func(ctx context.Context, job *wire.Job, w Welcome) error {
		if w.UserID == 0 {
			return fmt.Errorf("no user")
		}
		fmt.Println("sending welcome to", w.UserID)
		return nil
	}))
	ctx := context.Background()
	for _, w := range []Welcome{{UserID: 7}, {}} {
		job, _ := typed.NewJob("WelcomeMailJob", w)
		_, err := f.Client().Push(ctx, job, nil)
		fmt.Println("push:", err)
	}
	// Output:
	// sending welcome to 7
	// push: <nil>
	// push: no user
}
