package sidejob

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// port_spec.rb
func TestPortNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	j := b.queue(t, "TestSum", nil)
	for _, bad := range []string{"", "a-b", "a\nb", "*", "in "} {
		_, err := j.Input(ctx, bad)
		require.Error(t, err, "%q", bad)
	}
	_, err := j.Input(ctx, "missing")
	require.ErrorIs(t, err, errNoPort)
	_, err = j.Input(ctx, "IN")
	require.ErrorIs(t, err, errNoPort, "case sensitive")
	p := b.input(t, j, "in")
	require.Equal(t, "job:1:in:in", p.String())
	require.True(t, p.equal(b.input(t, j, "in")))
	require.False(t, p.equal(b.output(t, j, "sum")))
}

func TestPortDataAndDefaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	j := b.queue(t, "TestSum", nil)
	p := b.input(t, j, "in")
	require.Equal(t, "None", b.read(t, p))
	ok, err := p.hasData(ctx)
	require.NoError(t, err)
	require.False(t, ok)
	vals := []any{1, 2.5, "x", true, false, nil, []any{1, "a"}, map[string]any{"k": []any{}}}
	b.write(t, p, vals...)
	n, err := p.size(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(len(vals)), n)
	for _, want := range []string{"1", "2.5", `"x"`, "true", "false", "null", `[1,"a"]`, `{"k":[]}`} {
		require.Equal(t, want, b.read(t, p))
	}
	// defaults: nil and false are real defaults, None clears
	for _, def := range []any{true, false, nil, 7, "s", map[string]any{"a": 1}, []any{2}} {
		require.NoError(t, p.SetDefault(ctx, def))
		has, err := p.hasDefault(ctx)
		require.NoError(t, err)
		require.True(t, has)
		d, err := p.defaultData(ctx)
		require.NoError(t, err)
		want, _ := rubyjson.FromGo(def)
		require.Equal(t, string(want.Encode()), string(d.Value.Encode()))
		require.Equal(t, string(want.Encode()), b.read(t, p), "returned on every read")
		require.Equal(t, string(want.Encode()), b.read(t, p))
		n, _ := p.size(ctx)
		require.Zero(t, n, "a default is not data")
		ok, _ := p.hasData(ctx)
		require.True(t, ok, "data? counts a default")
	}
	require.NoError(t, p.SetDefault(ctx, (*Data)(nil)))
	d, err := p.defaultData(ctx)
	require.NoError(t, err)
	require.Nil(t, d)
	require.Equal(t, "None", b.read(t, p))
	// entries drain and skip the default
	require.NoError(t, p.SetDefault(ctx, 0))
	b.write(t, p, 1, 2)
	es, err := p.entries(ctx)
	require.NoError(t, err)
	require.Len(t, es, 2)
	require.Equal(t, "0", b.read(t, p))
}

func TestPortWriteRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	parent := b.queue(t, "TestWorker", nil)
	child, err := parent.Queue(ctx, "testq", "TestSum", &QueueOpts{Name: "kid"})
	require.NoError(t, err)
	b.do(t, "DEL", "queue:testq")
	b.write(t, b.input(t, child, "in"), 1)
	require.Equal(t, []string{`2`}, jids(t, b), "an inport write queues its job, not the parent")
	b.do(t, "DEL", "queue:testq")
	b.write(t, b.output(t, child, "sum"), 1)
	require.Equal(t, []string{`1`}, jids(t, b), "an outport write queues the parent")
	b.do(t, "DEL", "queue:testq")
	require.NoError(t, b.c.inGroup(ctx, &groupOptions{Notify: opt(false)}, func(ctx context.Context) error {
		return b.input(t, child, "in").Write(ctx, 2)
	}))
	require.Empty(t, jids(t, b), "notify false")
}

func jids(t *testing.T, b *testBundle) []string {
	var out []string
	for _, raw := range b.list(t, "queue:testq") {
		m := mustObject(raw)
		v, _ := m.Get("jid")
		out = append(out, string(v.Encode()))
	}
	return out
}

func TestPortLogging(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	j := b.queue(t, "TestSum", nil)
	in, sum := b.input(t, j, "in"), b.output(t, j, "sum")
	sub := b.subscribe(t)
	require.NoError(t, b.c.inGroup(ctx, nil, func(ctx context.Context) error {
		return nil
	}))
	gctx := withContext(ctx, "user", "u")
	require.NoError(t, b.c.inGroup(gctx, nil, func(ctx context.Context) error {
		require.NoError(t, in.Write(ctx, 1))
		require.NoError(t, b.c.inGroup(ctx, &groupOptions{Notify: opt(false)}, func(ctx context.Context) error {
			require.NoError(t, in.Write(ctx, 2))
			_, err := in.Read(ctx)
			return err
		}))
		return sum.Write(ctx, 3)
	}))
	require.NoError(t, b.c.inGroup(ctx, &groupOptions{Log: opt(false)}, func(ctx context.Context) error {
		return in.Write(ctx, 4)
	}))
	b.read(t, in) // 2
	require.Equal(t, "4", b.read(t, in), "written with log false: the read is not logged")
	require.Equal(t, []string{
		`/sidejob/log  {"user":"u","timestamp":"…","read":[{"job":1,"data":[1],"inport":"in"}],"write":[{"job":1,"data":[1,2],"inport":"in"},{"job":1,"data":[3],"outport":"sum"}]}`,
		`/sidejob/log  {"timestamp":"…","read":[{"job":1,"data":[2],"inport":"in"}],"write":[]}`,
	}, normalize(sub.stop(t, b)), "nothing for an empty group; nested groups log once")
}

func TestPortEnvelopes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := rubyjson.IntValue(1)
	require.Equal(t, `{"data":1}`, string(encodeData(ctx, v)))
	cctx := withContextMap(ctx, nil)
	require.Equal(t, `{"data":1,"context":{}}`, string(encodeData(cctx, v)))
	cctx = withContext(withContext(ctx, "job", 1), "user", "x")
	require.Equal(t, `{"data":1,"context":{"job":1,"user":"x"}}`, string(encodeData(cctx, v)))
	b := setup(t)
	require.NoError(t, b.c.inGroup(ctx, &groupOptions{Log: opt(true)}, func(ctx context.Context) error {
		require.Equal(t, `{"data":1,"options":{"log":true}}`, string(encodeData(ctx, v)))
		return b.c.inGroup(ctx, &groupOptions{Notify: opt(false)}, func(ctx context.Context) error {
			require.Equal(t, `{"data":1,"options":{"log":true,"notify":false}}`, string(encodeData(ctx, v)))
			return nil
		})
	}))
	require.NoError(t, b.c.inGroup(ctx, nil, func(ctx context.Context) error {
		require.Equal(t, `{"data":1,"options":{}}`, string(encodeData(ctx, v)))
		return nil
	}))
	d, err := decodeData([]byte(`{"data":[1,{"a":null}],"context":{"job":1},"options":{"log":false}}`))
	require.NoError(t, err)
	require.Equal(t, `[1,{"a":null}]`, string(d.Value.Encode()))
	require.Equal(t, `{"job":1}`, string(d.Context.Encode()))
	require.False(t, d.logged())
	d, err = decodeData([]byte(`{"data":null}`))
	require.NoError(t, err)
	require.True(t, d.Value.Kind() == rubyjson.Null)
	require.Zero(t, d.Context.Len())
}

func TestPortSetDefaultGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	j := b.queue(t, "TestSum", nil)
	sum := b.output(t, j, "sum")
	require.NoError(t, b.c.inGroup(ctx, &groupOptions{SetDefault: opt(true)}, func(ctx context.Context) error {
		return sum.Write(ctx, 9)
	}))
	n, _ := sum.size(ctx)
	require.Zero(t, n)
	require.Equal(t, map[string]string{"sum": `{"data":9,"options":{"set_default":true}}`}, b.hash(t, "job:1:outports:default"))
}

func TestPortChannels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	j := b.queue(t, "TestSum", nil)
	in, sum := b.input(t, j, "in"), b.output(t, j, "sum")
	require.NoError(t, in.setChannels(ctx, []string{"/a", "/b"}))
	require.Equal(t, []string{"1"}, b.set(t, "channel:/a"))
	chans, _ := in.channels(ctx)
	require.Equal(t, []string{"/a", "/b"}, chans)
	require.NoError(t, in.setChannels(ctx, nil))
	chans, _ = in.channels(ctx)
	require.Equal(t, []string{}, chans)
	require.Equal(t, []string{"1"}, b.set(t, "channel:/a"), "membership kept (lazy)")
	require.NoError(t, sum.setChannels(ctx, []string{"/out"}))
	require.False(t, b.exists(t, "channel:/out"), "an outport's channels do not touch channel:*")
	sub := b.subscribe(t)
	b.write(t, in, 5)
	b.write(t, sum, 6)
	msgs := sub.stop(t, b)
	var chs []string
	for _, m := range msgs {
		chs = append(chs, m.Channel)
	}
	require.Contains(t, chs, "/out")
	require.NotContains(t, chs, "/a", "an inport write does not publish")
}

func TestPortConnectTo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	src := b.queue(t, "TestSum", nil)
	dst := b.queue(t, "TestSum", nil)
	from, to := b.output(t, src, "sum"), b.input(t, dst, "in")
	got, err := from.connectTo(ctx, to)
	require.NoError(t, err)
	require.Empty(t, got)
	require.NoError(t, b.c.inGroup(ctx, &groupOptions{Notify: opt(false)}, func(ctx context.Context) error {
		return from.Write(withContext(ctx, "by", "me"), 1)
	}))
	b.write(t, from, 2)
	require.NoError(t, to.SetDefault(ctx, 0))
	require.NoError(t, dst.setStatus(ctx, "completed"))
	b.do(t, "DEL", "queue:testq")
	sub := b.subscribe(t)
	got, err = from.connectTo(ctx, to, b.output(t, dst, "sum"))
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, []string{`{"data":1,"context":{"by":"me"},"options":{"notify":false}}`, `{"data":2}`}, b.list(t, "job:2:in:in"), "raw envelopes")
	require.Equal(t, "1", b.read(t, to))
	require.Equal(t, "2", b.read(t, to))
	require.Equal(t, "0", b.read(t, to), "the destination default after the data")
	require.Equal(t, "queued", b.status(t, dst))
	require.Contains(t, normalize(sub.stop(t, b)),
		`/sidejob/log  {"timestamp":"…","read":[{"job":1,"data":[1,2],"outport":"sum"}],"write":[{"job":2,"data":[1,2],"inport":"in"},{"job":2,"data":[1,2],"outport":"sum"}]}`)
	// defaults are copied; unchanged defaults do not run the job
	require.NoError(t, from.SetDefault(ctx, 5))
	require.NoError(t, dst.setStatus(ctx, "completed"))
	_, err = from.connectTo(ctx, to)
	require.NoError(t, err)
	require.Equal(t, "queued", b.status(t, dst), "default changed → run")
	require.NoError(t, dst.setStatus(ctx, "completed"))
	_, err = from.connectTo(ctx, to)
	require.NoError(t, err)
	require.Equal(t, "completed", b.status(t, dst), "default unchanged → no run")
	require.Equal(t, "5", b.read(t, to))
}

func TestDynamicPorts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	j := b.queue(t, "TestWorker", &QueueOpts{
		Inports:  `{"*":{"default":"d","channels":["/star"]}}`,
		Outports: `{"*":{}}`,
	})
	p := b.input(t, j, "new1")
	require.Equal(t, `"d"`, b.read(t, p))
	chans, _ := p.channels(ctx)
	require.Empty(t, chans, "channels are not inherited")
	o := b.output(t, j, "o1")
	require.Equal(t, "None", b.read(t, o))
	conn := b.pool.Get()
	defer conn.Close()
	ports, err := sidejobwire.Ports(ctx, conn, j.ID())
	require.NoError(t, err)
	require.Len(t, ports, 2)
	require.Equal(t, [2]string{"in", "new1"}, [2]string{ports[0].Type, ports[0].Name})
	require.Equal(t, [2]string{"out", "o1"}, [2]string{ports[1].Type, ports[1].Name})
	require.Equal(t, `"d"`, string(ports[0].Default.Encode()), "the default of * is copied")
	require.False(t, ports[1].HasDefault)
}
