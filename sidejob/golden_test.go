package sidejob

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// quietWorker is the golden scenario's QuietWorker: perform raises "boom".
type quietWorker struct{}

func (quietWorker) Perform(context.Context, *Job, []rubyjson.Value) error {
	return &tracedError{msg: "boom", trace: []string{"<frames>", "/gems/sidekiq/processor.rb:1:in `call'"}}
}

// TestGoldenScenario reproduces the recorded run of the 4.1.0 gem
// (docs/sidejob.md#golden-session) and checks
// the pub/sub messages and the Redis keys against the golden sample (ids and
// timestamps aside).
func TestGoldenScenario(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.do(t, "FLUSHALL")
	reg := &Registry{}
	require.NoError(t, reg.Register("TestSum", testSum{}, `{"description":"sums","inports":{"ready":{},"in":{}},"outports":{"sum":{}}}`))
	require.NoError(t, reg.Register("TestWorker", workerFunc(func(context.Context, *Job, []rubyjson.Value) error { return nil }), ""))
	require.NoError(t, reg.Register("QuietWorker", quietWorker{}, `{"status_publish":false,"inports":{"*":{"default":"star"}}}`))
	rt, err := newJobRuntime(&runtimeConfig{Client: b.c, Registry: reg})
	require.NoError(t, err)
	sub := b.subscribe(t)

	require.NoError(t, b.c.registerAll(ctx, "testq", reg))
	job1, err := b.c.Queue(ctx, "testq", "TestSum", &QueueOpts{
		Args:     []any{1, "a"},
		By:       "user:1",
		Inports:  `{"extra":{"default":[1,2],"channels":["/test/chan"]}}`,
		Outports: `{"sum":{"channels":["/test/out"]}}`,
	})
	require.NoError(t, err)
	job2, err := job1.Queue(ctx, "testq", "TestWorker", &QueueOpts{Name: "kid", Inports: `{"*":{"default":5}}`})
	require.NoError(t, err)
	_, err = job2.Input(ctx, "dyn")
	require.NoError(t, err)
	require.NoError(t, job1.AddAlias(ctx, "myalias"))
	in := b.input(t, job1, "in")
	require.NoError(t, in.Write(withContext(ctx, "user", "x"), 3))
	require.NoError(t, in.Write(ctx, 4))
	require.NoError(t, b.input(t, job1, "ready").Write(ctx, true))
	state := rubyjson.NewMap()
	state.Set("foo", rubyjson.ObjectValue(mustObject(`{"a":1}`)))
	state.Set("bar", rubyjson.StringValue("x"))
	require.NoError(t, job1.setMany(ctx, state))
	require.NoError(t, b.c.Publish(ctx, "/test/chan/sub", mustObject(`{"hello":1}`)))
	at := time.Now().Add(time.Hour)
	job3, err := b.c.Queue(ctx, "testq", "QuietWorker", &QueueOpts{At: at})
	require.NoError(t, err)
	require.NoError(t, rt.runInline(ctx, job3, &inlineOpts{SwallowErrors: true}))
	require.NoError(t, rt.runInline(ctx, job1, nil))
	require.NoError(t, b.c.Log(ctx, "a string message"))

	require.Equal(t, []string{
		`/sidejob/workers/testq  {"TestSum":{"description":"sums","inports":{"ready":{},"in":{}},"outports":{"sum":{}}},"TestWorker":{},"QuietWorker":{"status_publish":false,"inports":{"*":{"default":"star"}}}}`,
		`/sidejob/job/1  {"status":"queued"}`,
		`/sidejob/job/2  {"status":"queued"}`,
		`/sidejob/log  {"user":"x","timestamp":"…","read":[],"write":[{"job":1,"data":[3],"inport":"in"}]}`,
		`/sidejob/log  {"timestamp":"…","read":[],"write":[{"job":1,"data":[4],"inport":"in"}]}`,
		`/sidejob/log  {"timestamp":"…","read":[],"write":[{"job":1,"data":[true],"inport":"ready"}]}`,
		`/test/chan/sub  {"hello":1}`,
		`/sidejob/log  {"channel":"/test/chan/sub","timestamp":"…","read":[],"write":[{"job":1,"data":[{"hello":1}],"inport":"extra"}]}`,
		`/sidejob/log  {"job":3,"timestamp":"…","error":"boom","backtrace":"<frames>"}`,
		`/sidejob/job/1  {"status":"running"}`,
		`/sidejob/log  {"job":1,"timestamp":"…","read":[{"job":1,"data":[3],"inport":"in"}],"write":[]}`,
		`/sidejob/log  {"job":1,"timestamp":"…","read":[{"job":1,"data":[4],"inport":"in"}],"write":[]}`,
		`/sidejob/log  {"job":1,"timestamp":"…","read":[],"write":[{"job":1,"data":[7],"outport":"sum"}]}`,
		`/test/out  7`,
		`/sidejob/job/1  {"status":"completed"}`,
		`/sidejob/log  {"timestamp":"…","message":"a string message"}`,
	}, normalize(sub.stop(t, b)))

	ts := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$`)
	require.Equal(t, []string{"1"}, b.set(t, "channel:/test/chan"))
	require.False(t, b.exists(t, "channel:/test/out"), "pruned by the publish")
	require.Equal(t, []string{"myalias"}, b.set(t, "job:1:aliases"))
	require.Equal(t, map[string]string{"kid": "2"}, b.hash(t, "job:1:children"))
	require.Regexp(t, ts, b.str(t, "job:1:created_at"))
	require.Equal(t, "user:1", b.str(t, "job:1:created_by"))
	require.Equal(t, []string{`{"data":{"hello":1},"context":{"channel":"/test/chan/sub"}}`}, b.list(t, "job:1:in:extra"))
	require.Equal(t, []string{`{"data":true}`}, b.list(t, "job:1:in:ready"))
	require.False(t, b.exists(t, "job:1:in:in"))
	require.Equal(t, []string{"extra", "in", "ready"}, b.set(t, "job:1:inports"))
	require.Equal(t, map[string]string{"extra": `["/test/chan"]`}, b.hash(t, "job:1:inports:channels"))
	require.Equal(t, map[string]string{"extra": `{"data":[1,2]}`}, b.hash(t, "job:1:inports:default"))
	require.Equal(t, []string{`{"data":7,"context":{"job":1}}`}, b.list(t, "job:1:out:sum"))
	require.Equal(t, []string{"sum"}, b.set(t, "job:1:outports"))
	require.Equal(t, map[string]string{"sum": `["/test/out"]`}, b.hash(t, "job:1:outports:channels"))
	require.Regexp(t, ts, b.str(t, "job:1:ran_at"))
	rateKeys, err := redis.Strings(b.do(t, "KEYS", "job:1:rate:*"), nil)
	require.NoError(t, err)
	require.Len(t, rateKeys, 1)
	require.Regexp(t, `^job:1:rate:\d+$`, rateKeys[0])
	minute, _ := strconv.ParseInt(rateKeys[0][len("job:1:rate:"):], 10, 64)
	require.InDelta(t, time.Now().Unix()/60, minute, 1)
	require.Equal(t, "1", b.str(t, rateKeys[0]))
	ttl, _ := redis.Int(b.do(t, "TTL", rateKeys[0]), nil)
	require.True(t, ttl > 55 && ttl <= 60, "ttl %d", ttl)
	require.Equal(t, map[string]string{"bar": `"x"`, "foo": `{"a":1}`}, b.hash(t, "job:1:state"))
	require.Equal(t, "completed", b.str(t, "job:1:status"))
	require.Equal(t, `{"queue":"testq","class":"TestSum","args":[1,"a"]}`, b.str(t, "job:1:worker"))
	require.Equal(t, "job:1", b.str(t, "job:2:created_by"))
	require.Equal(t, []string{"*", "dyn"}, b.set(t, "job:2:inports"))
	require.Equal(t, map[string]string{"*": `{"data":5}`, "dyn": `{"data":5}`}, b.hash(t, "job:2:inports:default"))
	require.Equal(t, "1", b.str(t, "job:2:parent"))
	require.Equal(t, "queued", b.str(t, "job:2:status"))
	require.Equal(t, `{"queue":"testq","class":"TestWorker","args":null}`, b.str(t, "job:2:worker"))
	require.True(t, b.exists(t, "job:3:created_by"))
	require.Equal(t, "", b.str(t, "job:3:created_by"))
	require.Equal(t, "failed", b.str(t, "job:3:status"))
	require.Equal(t, []string{"1", "2", "3"}, b.set(t, "jobs"))
	require.Equal(t, map[string]string{"myalias": "1"}, b.hash(t, "jobs:aliases"))
	require.Equal(t, "3", b.str(t, "jobs:last_id"))
	items := b.list(t, "queue:testq")
	require.Len(t, items, 2)
	require.Regexp(t, `^\{"retry":false,"queue":"testq","jid":2,"class":"TestWorker","args":\[\],"created_at":\d+\.\d+,"enqueued_at":\d+\.\d+\}$`, items[0])
	require.Regexp(t, `^\{"retry":false,"queue":"testq","jid":1,"class":"TestSum","args":\[1,"a"\],"created_at":\d+\.\d+,"enqueued_at":\d+\.\d+\}$`, items[1])
	sched, err := redis.Strings(b.do(t, "ZRANGE", "schedule", 0, -1, "WITHSCORES"), nil)
	require.NoError(t, err)
	require.Len(t, sched, 2)
	require.Regexp(t, `^\{"retry":false,"queue":"testq","jid":3,"class":"QuietWorker","args":\[\],"created_at":\d+\.\d+\}$`, sched[0])
	score, _ := strconv.ParseFloat(sched[1], 64)
	require.InDelta(t, float64(at.UnixNano())/1e9, score, 0.001)
	require.Equal(t, map[string]string{
		"TestSum":     `{"description":"sums","inports":{"ready":{},"in":{}},"outports":{"sum":{}}}`,
		"TestWorker":  `{}`,
		"QuietWorker": `{"status_publish":false,"inports":{"*":{"default":"star"}}}`,
	}, b.hash(t, "workers:testq"))
	require.False(t, b.exists(t, "job:1:lock"), "released after the run")
	require.False(t, b.exists(t, "job:1:lock:worker"))
}

// TestReadGoldenState loads a Redis state written as the 4.1.0 gem writes it
// (the values of docs/sidejob.md#golden-session) and checks that the API reads it.
func TestReadGoldenState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	for _, kv := range [][]any{
		{"SET", "jobs:last_id", "3"},
		{"SADD", "jobs", "1", "2", "3"},
		{"HSET", "jobs:aliases", "myalias", "1"},
		{"SET", "job:1:worker", `{"queue":"testq","class":"TestSum","args":[1,"a"]}`},
		{"SET", "job:1:status", "completed"},
		{"SET", "job:1:created_at", "2026-03-01T10:11:12.123456789Z"},
		{"SET", "job:1:created_by", "user:1"},
		{"SET", "job:1:ran_at", "2026-03-01T10:11:13.000000500Z"},
		{"SADD", "job:1:aliases", "myalias"},
		{"HSET", "job:1:children", "kid", "2"},
		{"RPUSH", "job:1:in:extra", `{"data":{"hello":1},"context":{"channel":"/test/chan/sub"}}`},
		{"RPUSH", "job:1:in:ready", `{"data":true}`},
		{"SADD", "job:1:inports", "extra", "in", "ready"},
		{"HSET", "job:1:inports:channels", "extra", `["/test/chan"]`},
		{"HSET", "job:1:inports:default", "extra", `{"data":[1,2]}`},
		{"RPUSH", "job:1:out:sum", `{"data":7,"context":{"job":1}}`},
		{"SADD", "job:1:outports", "sum"},
		{"HSET", "job:1:outports:channels", "sum", `["/test/out"]`},
		{"HSET", "job:1:state", "bar", `"x"`, "foo", `{"a":1}`},
		{"SET", "job:2:worker", `{"queue":"testq","class":"TestWorker","args":null}`},
		{"SET", "job:2:status", "queued"},
		{"SET", "job:2:created_by", "job:1"},
		{"SET", "job:2:parent", "1"},
		{"SADD", "job:2:inports", "*", "dyn"},
		{"HSET", "job:2:inports:default", "*", `{"data":5}`, "dyn", `{"data":5}`},
		{"SET", "job:3:worker", `{"queue":"testq","class":"TestWorker","args":[]}`},
		{"SET", "job:3:status", "failed"},
		{"SET", "job:3:created_by", ""},
	} {
		b.do(t, kv[0].(string), kv[1:]...)
	}
	job1, err := b.c.Find(ctx, "myalias")
	require.NoError(t, err)
	require.Equal(t, int64(1), job1.ID())
	info, err := job1.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, "testq", info.Queue)
	require.Equal(t, "TestSum", info.Class)
	require.Equal(t, `[1,"a"]`, string(info.Args.Encode()))
	require.Equal(t, "user:1", info.CreatedBy)
	require.Equal(t, []string{"myalias"}, info.Aliases)
	ran, err := sidejobwire.ParseTimestamp(info.RanAt)
	require.NoError(t, err)
	require.Equal(t, 500, ran.Nanosecond())
	children, err := job1.Children(ctx)
	require.NoError(t, err)
	require.Len(t, children, 1)
	require.Equal(t, int64(2), children["kid"].ID())
	parent, err := children["kid"].Parent(ctx)
	require.NoError(t, err)
	require.True(t, parent.equal(job1))

	extra := b.input(t, job1, "extra")
	d, err := extra.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, `{"hello":1}`, string(d.Value.Encode()))
	require.Equal(t, `{"channel":"/test/chan/sub"}`, string(d.Context.Encode()))
	require.Equal(t, `[1,2]`, b.read(t, extra), "then the default")
	chans, err := extra.channels(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"/test/chan"}, chans)
	sum := b.output(t, job1, "sum")
	d, err = sum.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, "7", string(d.Value.Encode()))
	require.Equal(t, `{"job":1}`, string(d.Context.Encode()))
	v, ok, err := job1.get(ctx, "foo")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, `{"a":1}`, string(v.Encode()))
	v, _, err = job1.get(ctx, "bar")
	require.NoError(t, err)
	s, _ := v.Str()
	require.Equal(t, "x", s)

	job2 := children["kid"]
	require.Equal(t, "queued", b.status(t, job2))
	info2, err := job2.Info(ctx)
	require.NoError(t, err)
	require.True(t, info2.Args.Kind() == rubyjson.Null)
	other := b.input(t, job2, "other")
	require.Equal(t, "5", b.read(t, other), "a new dynamic port inherits the * default")
	ports, err := job2.ports(ctx, inPort)
	require.NoError(t, err)
	require.Len(t, ports, 2)

	job3, err := b.c.Find(ctx, "3")
	require.NoError(t, err)
	got, err := job3.Run(ctx, nil)
	require.NoError(t, err)
	require.Nil(t, got, "failed jobs are not run without force")
	// Ruby pushed job 2 with an integer jid; a run request sees it.
	b.do(t, "LPUSH", "queue:testq", `{"retry":false,"queue":"testq","jid":2,"class":"TestWorker","args":[],"created_at":1.5,"enqueued_at":1.5}`)
	_, err = job2.Run(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, 1, b.enqueued(t), "no duplicate push")
	missing, err := b.c.Find(ctx, "nope")
	require.NoError(t, err)
	require.Nil(t, missing)
	_, err = b.c.load(ctx, 42)
	require.True(t, errors.Is(err, ErrJobNotFound))
}
