package compat_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/activejob"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/typed"
	"github.com/gojob/gojob/sidekiq/wire"
)

type tcAddress struct {
	City string
	Zip  *string
}

// tcSignup is TcHash's one hash argument.
type tcSignup struct {
	UserID  int64 `json:"user_id"`
	Plan    string
	Price   float64
	Tags    []string
	Address tcAddress
	SeenAt  time.Time
}

// tcCharge is TcPos's positional arguments.
type tcCharge struct {
	typed.Positional
	AccountID int64
	Amount    float64
	Currency  string
	Retry     bool `sidekiq:",optional"`
}

// tcNotify is TcAj's ActiveJob arguments.
type tcNotify struct {
	typed.Positional
	User   activejob.GlobalID
	Kind   activejob.Symbol
	At     time.Time
	Wait   time.Duration
	Params struct {
		Count int
	}
}

// TestTypedCompatRubyPushedArgs: Ruby 6.4.1's perform_async and Rails
// 6.1's perform_later push jobs; gojob's typed handlers decode their
// arguments, a typed push of the decoded values writes the payload Ruby
// wrote (timestamps and jid aside), and a payload that does not fit fails
// into the retry set naming the argument, unchanged.
func TestTypedCompatRubyPushedArgs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.ruby(t, ajRubySetup+`
class TcHash; include Sidekiq::Worker; sidekiq_options queue: "tc"; end
class TcPos; include Sidekiq::Worker; sidekiq_options queue: "tc"; end
class TcOpts; include Sidekiq::Worker; sidekiq_options queue: "tc_opts", retry: 5; end
TcOpts.perform_async(1, "x")
class TcAj < ActiveJob::Base
  queue_as :tc
  def perform(*args); end
end
TcHash.perform_async("user_id" => 42, "plan" => :pro, "price" => 9.5, "tags" => ["a", :b],
  "address" => {"city" => "Oslo", "zip" => nil}, "seen_at" => 1700000000.25)
TcPos.perform_async(7, 20.0, "eur")
TcPos.perform_async(8, 1.0, "nok", true)
TcPos.perform_async("9", 1.5, "sek")
TcAj.perform_later(Person.new(9), :welcome, Time.utc(2024, 1, 2, 3, 4, 5), 5.minutes, {count: 3})
`)
	opts, err := redis.Strings(e.do(t, "LRANGE", "queue:tc_opts", 0, -1), nil)
	require.NoError(t, err)
	require.Len(t, opts, 1)
	raw, err := redis.Strings(e.do(t, "LRANGE", "queue:tc", 0, -1), nil)
	require.NoError(t, err)
	require.Len(t, raw, 5)
	byJID := map[string]string{}
	for _, r := range raw {
		j, err := wire.ParseJob([]byte(r))
		require.NoError(t, err)
		byJID[j.JID()] = r
	}

	var mu sync.Mutex
	signups := map[string]tcSignup{}
	charges := map[string]tcCharge{}
	notifies := map[string]tcNotify{}
	srv := svNewServer(t, e, sidekiq.ServerConfig{Queues: []wire.QueueWeight{{Name: "tc"}}, Concurrency: 2, DisablePoller: true}, func(s *sidekiq.Server) {
		s.Handle("TcHash", typed.Handler(func(ctx context.Context, job *wire.Job, a tcSignup) error {
			mu.Lock()
			defer mu.Unlock()
			signups[job.JID()] = a
			return nil
		}), nil)
		s.Handle("TcPos", typed.Handler(func(ctx context.Context, job *wire.Job, a tcCharge) error {
			mu.Lock()
			defer mu.Unlock()
			charges[job.JID()] = a
			return nil
		}), nil)
		s.Handle("TcAj", typed.Handler(func(ctx context.Context, job *wire.Job, a tcNotify) error {
			mu.Lock()
			defer mu.Unlock()
			notifies[job.JID()] = a
			return nil
		}), nil)
	})
	require.NoError(t, srv.Start(context.Background()))
	wait.For(t, "four jobs run and one retry", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(signups)+len(charges)+len(notifies) == 4 && svInt(t, e, "ZCARD", "retry") == 1
	})
	svStop(t, srv) // the typed pushes below stay in the queue

	// The decoded values.
	var signupJID string
	for jid, s := range signups {
		signupJID = jid
		require.Equal(t, tcSignup{UserID: 42, Plan: "pro", Price: 9.5, Tags: []string{"a", "b"},
			Address: tcAddress{City: "Oslo"}, SeenAt: time.Unix(1700000000, 250000000).UTC()}, s)
	}
	require.ElementsMatch(t, []tcCharge{{AccountID: 7, Amount: 20, Currency: "eur"},
		{AccountID: 8, Amount: 1, Currency: "nok", Retry: true}}, mapValues(charges))
	var notifyJID string
	for jid, n := range notifies {
		notifyJID = jid
		require.Equal(t, activejob.GlobalID("gid://gojob/Person/9"), n.User)
		require.Equal(t, activejob.Symbol("welcome"), n.Kind)
		require.True(t, time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC).Equal(n.At), n.At)
		require.Equal(t, 5*time.Minute, n.Wait)
		require.Equal(t, 3, n.Params.Count)
	}

	// A typed push of the same values writes Ruby's payload.
	rubyPayload := func(jid string) *rubyjson.Map {
		m, err := rubyjson.ParseObject([]byte(byJID[jid]))
		require.NoError(t, err)
		return m
	}
	goPayload := func(class string, job *wire.Job) *rubyjson.Map {
		job.SetQueue("tc")
		res, err := e.client.Push(context.Background(), job, nil)
		require.NoError(t, err)
		m, err := rubyjson.ParseObject(res.Payload)
		require.NoError(t, err)
		return m
	}
	same := func(ruby, goM *rubyjson.Map) {
		t.Helper()
		for _, k := range []string{"jid", "created_at", "enqueued_at"} {
			require.True(t, ruby.Has(k) && goM.Has(k), k)
			ruby.Set(k, rubyjson.Value{})
			goM.Set(k, rubyjson.Value{})
		}
		require.Equal(t, string(ruby.Encode()), string(goM.Encode()))
	}
	j, err := typed.NewJob("TcHash", signups[signupJID])
	require.NoError(t, err)
	same(rubyPayload(signupJID), goPayload("TcHash", j))
	for jid, c := range charges {
		j, err := typed.NewJob("TcPos", c)
		require.NoError(t, err)
		same(rubyPayload(jid), goPayload("TcPos", j))
	}

	// Args that name their class and options push what Ruby's
	// sidekiq_options write.
	res, err := typed.Push(context.Background(), e.client, tcOpts{N: 1, S: "x"}, nil)
	require.NoError(t, err)
	rm, err := rubyjson.ParseObject([]byte(opts[0]))
	require.NoError(t, err)
	gm, err := rubyjson.ParseObject(res.Payload)
	require.NoError(t, err)
	same(rm, gm)

	// A typed ActiveJob push writes the arguments perform_later wrote.
	ajArgs, err := typed.ActiveJobArgs(notifies[notifyJID])
	require.NoError(t, err)
	res, err = activejob.Push(context.Background(), e.client, &activejob.Params{Class: "TcAj", Queue: "tc", Args: ajArgs}, nil)
	require.NoError(t, err)
	ajArguments := func(payload []byte) string {
		j, err := wire.ParseJob(payload)
		require.NoError(t, err)
		m, ok := j.Args()[0].Map()
		require.True(t, ok)
		a, _ := m.Get("arguments")
		return string(a.Encode())
	}
	require.Equal(t, ajArguments([]byte(byJID[notifyJID])), ajArguments(res.Payload))

	// The mismatched job, in the retry set unchanged but for the retry
	// fields, names the argument and the Go type.
	retried, err := redis.Strings(e.do(t, "ZRANGE", "retry", 0, -1), nil)
	require.NoError(t, err)
	rj, err := wire.ParseJob([]byte(retried[0]))
	require.NoError(t, err)
	msg, _ := rj.Get("error_message")
	s, _ := msg.Str()
	require.Equal(t, `typed: TcPos args[0] (tcCharge.AccountID): cannot decode string "9" into int64`, s)
	orig := rubyPayload(rj.JID())
	for _, k := range orig.Keys() {
		ov, _ := orig.Get(k)
		rv, _ := rj.Get(k)
		require.True(t, rubyjson.Equal(ov, rv), "key %s changed: %s -> %s", k, ov.Encode(), rv.Encode())
	}
	require.True(t, strings.Contains(retried[0], `"args":["9",1.5,"sek"]`))
}

// tcOpts are the arguments of TcOpts, which has sidekiq_options.
type tcOpts struct {
	typed.Positional
	N int
	S string
}

func (tcOpts) JobClass() string { return "TcOpts" }
func (tcOpts) JobOptions() typed.JobOptions {
	return typed.JobOptions{Queue: "tc_opts", Retry: 5}
}

func mapValues[K comparable, V any](m map[K]V) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
