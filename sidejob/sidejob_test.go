package sidejob

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// sidejob_spec.rb
func TestAscend(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][]string{
		"/a/b":   {"/a/b", "/a", "/"},
		"a/b":    {"a/b", "a"},
		"abc":    {"abc"},
		"/a/b/":  {"/a/b/", "/a", "/"},
		"/":      {"/"},
		"/a/../": {"/a/../", "/a", "/"},
		"/a//b":  {"/a//b", "/a", "/"},
	} {
		require.Equal(t, want, ascend(in), in)
	}
}

func TestLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	sub := b.subscribe(t)
	m := rubyjson.NewMap()
	m.Set("abc", rubyjson.IntValue(123))
	require.NoError(t, b.c.Log(ctx, m))
	require.NoError(t, b.c.Log(ctx, errors.New("bad")))
	require.NoError(t, b.c.Log(ctx, &tracedError{msg: "e", trace: []string{"a.rb:1", "b.rb:2", "gems/sidekiq/x.rb:3", "c.rb:4"}}))
	cctx := withContext(withContext(ctx, "a", 1), "b", "x")
	require.NoError(t, b.c.Log(withContext(cctx, "a", 2), "msg"))
	require.NoError(t, b.c.Log(cctx, "after"))
	require.Equal(t, []string{
		`/sidejob/log  {"timestamp":"…","abc":123}`,
		`/sidejob/log  {"timestamp":"…","error":"bad"}`,
		`/sidejob/log  {"timestamp":"…","error":"e","backtrace":"a.rb:1\nb.rb:2"}`,
		`/sidejob/log  {"a":2,"b":"x","timestamp":"…","message":"msg"}`,
		`/sidejob/log  {"a":1,"b":"x","timestamp":"…","message":"after"}`,
	}, normalize(sub.stop(t, b)))
}

func TestLogNoLoop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	j := b.queue(t, "TestSum", nil)
	require.NoError(t, b.input(t, j, "in").setChannels(ctx, []string{"/sidejob/log", "/"}))
	require.NoError(t, b.c.Log(ctx, "hello"))
	n, err := b.input(t, j, "in").size(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), n, "delivered at both levels, no further log entries")
	d, err := b.input(t, j, "in").Read(ctx)
	require.NoError(t, err)
	require.False(t, d.logged())
}

func TestPublish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	j1 := b.queue(t, "TestSum", nil)
	j2 := b.queue(t, "TestSum", nil)
	j3 := b.queue(t, "TestSum", nil)
	require.NoError(t, b.input(t, j1, "in").setChannels(ctx, []string{"/test/a"}))
	require.NoError(t, b.input(t, j2, "in").setChannels(ctx, []string{"/test"}))
	require.NoError(t, b.input(t, j3, "in").setChannels(ctx, []string{"/test/a"}))
	require.NoError(t, b.input(t, j3, "in").setChannels(ctx, []string{"/other"}))
	b.do(t, "SADD", "channel:/test/a", "99")
	sub := b.subscribe(t)
	require.NoError(t, b.c.Publish(ctx, "/test/a", map[string]any{"x": 1}))
	msgs := sub.stop(t, b)
	require.Equal(t, message{"/test/a", `{"x":1}`}, msgs[0], "PUBLISH to the exact channel only")
	for _, m := range msgs {
		require.NotEqual(t, "/test", m.Channel)
	}
	for _, j := range []*Job{j1, j2} {
		p := b.input(t, j, "in")
		d, err := p.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, `{"x":1}`, string(d.Value.Encode()))
		require.Equal(t, `{"channel":"/test/a"}`, string(d.Context.Encode()))
	}
	require.Equal(t, "None", b.read(t, b.input(t, j3, "in")), "no longer subscribed")
	require.Equal(t, []string{"1"}, b.set(t, "channel:/test/a"), "stale members removed")
}
