package typed_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/activejob"
	"github.com/gojob/gojob/sidekiq/typed"
	"github.com/gojob/gojob/sidekiq/wire"
)

// ChargeArgs are the arguments of Ruby's
//
//	class ChargeJob
//	  include Sidekiq::Job
//	  def perform(account_id, amount, currency = "usd")
type ChargeArgs struct {
	typed.Positional
	AccountID int64
	Amount    float64
	Currency  string `sidekiq:",optional"`
}

// A typed handler for a job Ruby pushed with ChargeJob.perform_async(42,
// 9.5). Register it with srv.Handle("ChargeJob", h, nil).
func ExampleHandler() {
	h := typed.Handler(func(ctx context.Context, job *wire.Job, a ChargeArgs) error {
		fmt.Printf("charge account %d %.2f %q\n", a.AccountID, a.Amount, a.Currency)
		return nil
	})
	job, _ := wire.ParseJob([]byte(`{"retry":true,"queue":"default","args":[42,9.5],"class":"ChargeJob","jid":"0123456789abcdef01234567"}`))
	if err := h.Perform(context.Background(), job); err != nil {
		fmt.Println(err)
	}
	// Output:
	// charge account 42 9.50 ""
}

// SignupArgs bind to the single hash argument of
// SignupJob.perform_async("user_id" => 7, "plan" => :pro): fields are
// snake_case keys unless tagged.
type SignupArgs struct {
	UserID int64
	Plan   string
	Tags   []string `json:"labels"`
}

// Decode reads the one hash argument; Ruby's JSON wrote the Symbol :pro
// as "pro".
func ExampleDecode() {
	job, _ := wire.ParseJob([]byte(`{"class":"SignupJob","args":[{"user_id":7,"plan":"pro","labels":["beta"]}],"jid":"j"}`))
	a, err := typed.Decode[SignupArgs](job)
	fmt.Printf("%+v %v\n", a, err)
	// Output:
	// {UserID:7 Plan:pro Tags:[beta]} <nil>
}

// A payload that does not fit fails the job with an error naming the
// argument and the Go type; the job retries as any failed job does.
func ExampleArgError() {
	job, _ := wire.ParseJob([]byte(`{"class":"ChargeJob","args":[42.0,9.5],"jid":"j"}`))
	_, err := typed.Decode[ChargeArgs](job)
	fmt.Println(err)
	// Output:
	// typed: ChargeJob args[0] (ChargeArgs.AccountID): cannot decode float 42.0 into int64
}

// NewJob builds what ChargeJob.perform_async(42, 9.5) hands to the client:
// Client.Push adds retry, queue, jid and the timestamps. An optional
// trailing argument left at its zero value is not written, as a Ruby
// caller omits a default argument.
func ExampleNewJob() {
	job, err := typed.NewJob("ChargeJob", ChargeArgs{AccountID: 42, Amount: 9.5})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(job.Bytes()))
	job, _ = typed.NewJob("SignupJob", SignupArgs{UserID: 7, Plan: "pro"})
	fmt.Println(string(job.Bytes()))
	// Output:
	// {"args":[42,9.5],"class":"ChargeJob"}
	// {"args":[{"user_id":7,"plan":"pro","labels":[]}],"class":"SignupJob"}
}

// NewJob writes floats and times as Ruby does: 20.0 keeps its ".0" and a
// time.Time is Time#to_f.
func ExampleNewJob_rubyFormats() {
	type Reading struct {
		typed.Positional
		Sensor string
		Value  float64
		At     time.Time
	}
	job, _ := typed.NewJob("ReadingJob", Reading{Sensor: "t1", Value: 20, At: time.Unix(1700000000, 500000000)})
	for _, a := range job.Args() {
		fmt.Println(string(a.Encode()))
	}
	// Output:
	// "t1"
	// 20.0
	// 1700000000.5
}

// The arguments of an ActiveJob are deserialized as ActiveJob reads them
// before they bind: here NotifyJob.perform_later(user, :welcome,
// 5.minutes) with a GlobalID-locatable user.
func ExampleActiveJobArgs() {
	type Notify struct {
		typed.Positional
		User activejob.GlobalID
		Kind activejob.Symbol
		Wait time.Duration
	}
	args, _ := typed.ActiveJobArgs(Notify{User: "gid://app/User/9", Kind: "welcome", Wait: 5 * time.Minute})
	job, _ := activejob.New(&activejob.Params{Class: "NotifyJob", Args: args, JobID: "4f2a", EnqueuedAt: time.Unix(1700000000, 0)})
	back, err := typed.Decode[Notify](job)
	fmt.Println(back.User, back.Kind, back.Wait, err)
	// Output:
	// gid://app/User/9 welcome 5m0s <nil>
}

// ReportArgs name their class and its sidekiq_options, as River's JobArgs
// name their kind: typed.Push needs no class name.
type ReportArgs struct {
	typed.Positional
	Day string
}

func (ReportArgs) JobClass() string { return "ReportJob" }

func (ReportArgs) JobOptions() typed.JobOptions {
	return typed.JobOptions{Queue: "reports", Retry: 3}
}

// Push writes what ReportJob.perform_async("2024-01-02") writes for a
// class with sidekiq_options queue: "reports", retry: 3. A Server would
// run it with srv.Handle(ReportArgs{}.JobClass(), typed.Handler(report), nil).
func ExamplePush() {
	c, closeAll := exampleClient()
	defer closeAll()
	res, err := typed.Push(context.Background(), c, ReportArgs{Day: "2024-01-02"}, nil)
	if err != nil {
		panic(err)
	}
	job, _ := wire.ParseJob(res.Payload)
	job.Delete("jid")
	job.Delete("created_at")
	job.Delete("enqueued_at")
	fmt.Println(string(job.Bytes()))
	// Output:
	// {"retry":3,"queue":"reports","args":["2024-01-02"],"class":"ReportJob"}
}

// exampleClient is a client on an in-process Redis.
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
