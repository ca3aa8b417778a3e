package typed_test

import (
	"context"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/activejob"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/typed"
	"github.com/gojob/gojob/sidekiq/wire"
)

type Address struct {
	City string
	Zip  *string
}

type Signup struct {
	UserID  int64   `json:"user_id"`
	Plan    string  // "plan"
	Price   float64 // "price"
	Tags    []string
	Address Address
	Extra   map[string]any
	Seen    time.Time `sidekiq:"seen_at"`
	Skip    string    `json:"-"`
}

type Charge struct {
	typed.Positional
	AccountID int64
	Amount    float64
	Currency  string
	Retry     bool `sidekiq:",optional"`
}

func job(t *testing.T, payload string) *wire.Job {
	t.Helper()
	j, err := wire.ParseJob([]byte(payload))
	require.NoError(t, err)
	return j
}

func TestDecodeHashArgument(t *testing.T) {
	j := job(t, `{"class":"SignupJob","args":[{"user_id":42,"plan":"pro","price":10,"tags":["a","b"],"address":{"city":"Oslo","zip":null},"extra":{"n":1.5,"big":123456789012345678901234},"seen_at":1700000000.25,"ignored":true,"skip":"x"}],"jid":"j1","queue":"default"}`)
	got, err := typed.Decode[Signup](j)
	require.NoError(t, err)
	big, _ := new(big.Int).SetString("123456789012345678901234", 10)
	require.Equal(t, Signup{
		UserID: 42, Plan: "pro", Price: 10, Tags: []string{"a", "b"},
		Address: Address{City: "Oslo"},
		Extra:   map[string]any{"n": 1.5, "big": big},
		Seen:    time.Unix(1700000000, 250000000).UTC(),
	}, got)
}

func TestDecodePositional(t *testing.T) {
	got, err := typed.Decode[Charge](job(t, `{"class":"ChargeJob","args":[7,19.99,"eur"],"jid":"j"}`))
	require.NoError(t, err)
	require.Equal(t, Charge{AccountID: 7, Amount: 19.99, Currency: "eur"}, got)

	got, err = typed.Decode[Charge](job(t, `{"class":"ChargeJob","args":[7,20,"eur",true],"jid":"j"}`))
	require.NoError(t, err)
	require.Equal(t, Charge{AccountID: 7, Amount: 20, Currency: "eur", Retry: true}, got)
}

func TestDecodeScalarArgument(t *testing.T) {
	s, err := typed.Decode[string](job(t, `{"class":"X","args":["hello"],"jid":"j"}`))
	require.NoError(t, err)
	require.Equal(t, "hello", s)
	v, err := typed.Decode[rubyjson.Value](job(t, `{"class":"X","args":[{"b":1,"a":2}],"jid":"j"}`))
	require.NoError(t, err)
	require.Equal(t, `{"b":1,"a":2}`, string(v.Encode()))
}

// TestDecodeErrorsNameTheArgument: each mismatch names the argument as Ruby
// would write it, the Go field and the Go type.
func TestDecodeErrorsNameTheArgument(t *testing.T) {
	for _, c := range []struct {
		payload, want string
		hash          bool
	}{
		{`{"class":"ChargeJob","args":["7",1,"eur"]}`, `typed: ChargeJob args[0] (Charge.AccountID): cannot decode string "7" into int64`, false},
		{`{"class":"ChargeJob","args":[7,1,"eur",1]}`, `typed: ChargeJob args[3] (Charge.Retry): cannot decode integer 1 into bool`, false},
		{`{"class":"ChargeJob","args":[1.0,1,"eur"]}`, `typed: ChargeJob args[0] (Charge.AccountID): cannot decode float 1.0 into int64`, false},
		{`{"class":"ChargeJob","args":[7,1]}`, `typed: ChargeJob args[2] (Charge.Currency): cannot decode missing into string`, false},
		{`{"class":"ChargeJob","args":[7,1,"eur",true,5]}`, `typed: ChargeJob args: cannot decode 5 arguments (typed_test.Charge takes 4) into typed_test.Charge`, false},
		{`{"class":"SignupJob","args":[{"user_id":"x"}]}`, `typed: SignupJob args[0]["user_id"] (Signup.UserID): cannot decode string "x" into int64`, true},
		{`{"class":"SignupJob","args":[{"tags":["a",2]}]}`, `typed: SignupJob args[0]["tags"][1] (Signup.Tags): cannot decode integer 2 into string`, true},
		{`{"class":"SignupJob","args":[{"address":{"city":3}}]}`, `typed: SignupJob args[0]["address"]["city"] (Address.City): cannot decode integer 3 into string`, true},
		{`{"class":"SignupJob","args":[[1]]}`, `typed: SignupJob args[0]: cannot decode array into typed_test.Signup`, true},
		{`{"class":"SignupJob","args":[{},{}]}`, `typed: SignupJob args: cannot decode 2 arguments (typed_test.Signup takes 1) into typed_test.Signup`, true},
	} {
		var err error
		if c.hash {
			_, err = typed.Decode[Signup](job(t, c.payload))
		} else {
			_, err = typed.Decode[Charge](job(t, c.payload))
		}
		var ae *typed.ArgError
		require.ErrorAs(t, err, &ae, c.payload)
		require.Equal(t, c.want, err.Error())
	}
}

// TestHandlerFailsWithoutCallingFn: a payload that does not decode fails
// the job (the server retries it) and never reaches the function.
func TestHandlerFailsWithoutCallingFn(t *testing.T) {
	called := false
	h := typed.Handler(func(ctx context.Context, job *wire.Job, c Charge) error { called = true; return nil })
	err := h.Perform(context.Background(), job(t, `{"class":"ChargeJob","args":["x",1,"eur"],"jid":"j"}`))
	var ae *typed.ArgError
	require.True(t, errors.As(err, &ae))
	require.Equal(t, "args[0]", ae.Arg)
	require.False(t, called)

	var got Charge
	h = typed.Handler(func(ctx context.Context, job *wire.Job, c Charge) error { got = c; return nil })
	require.NoError(t, h.Perform(context.Background(), job(t, `{"class":"ChargeJob","args":[1,2,"x"],"jid":"j"}`)))
	require.Equal(t, Charge{AccountID: 1, Amount: 2, Currency: "x"}, got)
}

// TestEncodeRubyBytes: the arguments are written as Ruby's JSON.generate
// writes the same values.
func TestEncodeRubyBytes(t *testing.T) {
	j, err := typed.NewJob("ChargeJob", Charge{AccountID: 7, Amount: 20, Currency: "eur"})
	require.NoError(t, err)
	require.Equal(t, `{"args":[7,20.0,"eur"],"class":"ChargeJob"}`, string(j.Bytes()))

	zip := "0150"
	j, err = typed.NewJob("SignupJob", Signup{UserID: 1, Plan: "pro", Price: 1e20, Tags: nil,
		Address: Address{City: "Oslo", Zip: &zip}, Seen: time.Unix(1700000000, 500000000)})
	require.NoError(t, err)
	require.Equal(t, `{"args":[{"user_id":1,"plan":"pro","price":1.0e+20,"tags":[],"address":{"city":"Oslo","zip":"0150"},"extra":null,"seen_at":1700000000.5}],"class":"SignupJob"}`, string(j.Bytes()))

	// And back.
	back, err := typed.Decode[Signup](job(t, string(j.Bytes())))
	require.NoError(t, err)
	require.Equal(t, "0150", *back.Address.Zip)
	require.Equal(t, 1e20, back.Price)
}

// TestDecodeActiveJob: a wrapped ActiveJob's arguments are deserialized as
// ActiveJob reads them before they bind: symbols and GlobalIDs are
// strings, times are time.Time, hashes of any key kind are hashes.
func TestDecodeActiveJob(t *testing.T) {
	type Notify struct {
		typed.Positional
		User   string
		Kind   string
		At     time.Time
		Day    time.Time
		Wait   time.Duration
		Params struct {
			Count int `json:"count"`
		}
	}
	at := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	j, err := activejob.New(&activejob.Params{
		Class: "NotifyJob",
		Args: []any{activejob.GlobalID("gid://app/User/9"), activejob.Symbol("welcome"),
			activejob.Time{Time: at}, activejob.Date{Year: 2024, Month: 2, Day: 29}, 5 * time.Minute,
			map[string]any{"count": 3}},
		EnqueuedAt: at,
	})
	require.NoError(t, err)
	j, err = wire.ParseJob(j.Bytes())
	require.NoError(t, err)
	got, err := typed.Decode[Notify](j)
	require.NoError(t, err)
	require.Equal(t, "gid://app/User/9", got.User)
	require.Equal(t, "welcome", got.Kind)
	require.True(t, at.Equal(got.At))
	require.Equal(t, time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC), got.Day)
	require.Equal(t, 5*time.Minute, got.Wait)
	require.Equal(t, 3, got.Params.Count)

	type Wrong struct {
		typed.Positional
		User int
	}
	_, err = typed.Decode[Wrong](j)
	require.EqualError(t, err, `typed: NotifyJob args: cannot decode 6 arguments (typed_test.Wrong takes 1) into typed_test.Wrong`)
}

// TestActiveJobArgsRoundTrip: arguments written by ActiveJobArgs decode
// back into the same values, with the activejob types kept.
func TestActiveJobArgsRoundTrip(t *testing.T) {
	type Params struct {
		Count int
		Note  string `json:"note,omitempty"`
	}
	type Notify struct {
		typed.Positional
		User   activejob.GlobalID
		Kind   activejob.Symbol
		At     time.Time
		Wait   time.Duration
		Params Params
		Tags   []string `sidekiq:",optional"`
	}
	in := Notify{User: "gid://app/User/1", Kind: "hi", At: time.Date(2024, 5, 6, 7, 8, 9, 10, time.UTC), Wait: 90 * time.Second, Params: Params{Count: 2}}
	args, err := typed.ActiveJobArgs(in)
	require.NoError(t, err)
	require.Len(t, args, 5) // the optional Tags is left out
	j, err := activejob.New(&activejob.Params{Class: "NotifyJob", Args: args, EnqueuedAt: in.At})
	require.NoError(t, err)
	m, _ := j.Args()[0].Map()
	a, _ := m.Get("arguments")
	require.Contains(t, string(a.Encode()), `{"count":2,"_aj_symbol_keys":["count"]}`)
	out, err := typed.Decode[Notify](job(t, string(j.Bytes())))
	require.NoError(t, err)
	require.True(t, in.At.Equal(out.At))
	out.At = in.At
	require.Equal(t, in, out)
}

// TestHandleByArgsClass: the class the args type names registers the
// handler that runs the server's jobs Push pushed.
func TestHandleByArgsClass(t *testing.T) {
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	srv, err := sidekiq.NewServer(&sidekiq.ServerConfig{Pool: pool, Queues: []wire.QueueWeight{{Name: "reports"}}, Concurrency: 1, DisablePoller: true})
	require.NoError(t, err)
	type ran struct {
		queue string
		args  ReportArgs
	}
	got := make(chan ran, 1)
	srv.Handle(ReportArgs{}.JobClass(), typed.Handler(func(ctx context.Context, job *wire.Job, a ReportArgs) error {
		got <- ran{job.Queue(), a}
		return nil
	}), nil)
	ctx := context.Background()
	require.NoError(t, srv.Start(ctx))
	defer srv.Stop(ctx)
	res, err := typed.Push(ctx, srv.Client(), ReportArgs{Day: "2024-01-02"}, &sidekiq.PushOpts{ExpiresIn: time.Hour})
	require.NoError(t, err)
	require.Contains(t, string(res.Payload), `{"retry":3,"queue":"reports","args":["2024-01-02"],"class":"ReportJob","jid":`)
	require.Equal(t, ran{"reports", ReportArgs{Day: "2024-01-02"}}, <-got)
}

// Tenant is embedded in argument structs.
type Tenant struct {
	TenantID int64
	Region   string
}

// TestEmbeddedStructsFlatten: an embedded struct's fields bind as the
// outer struct's, as encoding/json has it; an outer field hides an
// embedded one of the same key.
func TestEmbeddedStructsFlatten(t *testing.T) {
	type Export struct {
		Tenant
		Format string
		Region string `json:"region"` // hides Tenant.Region
	}
	j, err := typed.NewJob("ExportJob", Export{Tenant: Tenant{TenantID: 3, Region: "inner"}, Format: "csv", Region: "eu"})
	require.NoError(t, err)
	require.Equal(t, `{"args":[{"tenant_id":3,"format":"csv","region":"eu"}],"class":"ExportJob"}`, string(j.Bytes()))
	back, err := typed.Decode[Export](job(t, string(j.Bytes())))
	require.NoError(t, err)
	require.Equal(t, Export{Tenant: Tenant{TenantID: 3}, Format: "csv", Region: "eu"}, back)

	type Move struct {
		typed.Positional
		Tenant
		To string
	}
	j, err = typed.NewJob("MoveJob", Move{Tenant: Tenant{1, "us"}, To: "eu"})
	require.NoError(t, err)
	require.Equal(t, `{"args":[1,"us","eu"],"class":"MoveJob"}`, string(j.Bytes()))
	m, err := typed.Decode[Move](job(t, `{"class":"MoveJob","args":[1,"us","eu"]}`))
	require.NoError(t, err)
	require.Equal(t, Move{Tenant: Tenant{1, "us"}, To: "eu"}, m)
	_, err = typed.Decode[Move](job(t, `{"class":"MoveJob","args":["1","us","eu"]}`))
	require.EqualError(t, err, `typed: MoveJob args[0] (Move.TenantID): cannot decode string "1" into int64`)
}
