package api_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// apiFillQueue LPUSHes n jobs j000… (j000 is the oldest, at index -1).
func apiFillQueue(t *testing.T, b *apiBundle, queue string, n int) {
	t.Helper()
	b.do(t, "SADD", "queues", queue)
	for i := range n {
		b.do(t, "LPUSH", "queue:"+queue, fmt.Sprintf(`{"class":"A","args":[%d],"jid":"j%03d","queue":"%s","enqueued_at":%d.5}`, i, i, queue, 1795296000+i))
	}
}

func TestAPIQueuesListSizeLatency(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	apiFillQueue(t, b, "zeta", 2)
	apiFillQueue(t, b, "alpha", 3)
	b.do(t, "SADD", "queues", "empty")

	qs, err := b.api.Queues(ctx)
	require.NoError(t, err)
	var names []string
	for _, q := range qs {
		names = append(names, q.Name())
	}
	require.Equal(t, []string{"alpha", "empty", "zeta"}, names)

	n, err := b.api.Queue("alpha").Size(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)

	lat, err := b.api.Queue("alpha").Latency(ctx)
	require.NoError(t, err)
	require.InDelta(t, 572.6651707, lat.Seconds(), 1e-6) // j000 enqueued at 1795296000.5
	lat, err = b.api.Queue("empty").Latency(ctx)
	require.NoError(t, err)
	require.Zero(t, lat)

	b.do(t, "RPUSH", "queue:ms", fmt.Sprintf(`{"enqueued_at":%d}`, apiNow.Add(-time.Minute).UnixMilli()))
	lat, err = b.api.Queue("ms").Latency(ctx)
	require.NoError(t, err)
	require.InDelta(t, 60.0, lat.Seconds(), 0.001)

	b.do(t, "RPUSH", "queue:created", `{"created_at":1795296572.16517}`)
	lat, err = b.api.Queue("created").Latency(ctx)
	require.NoError(t, err)
	require.InDelta(t, 1.0, lat.Seconds(), 1e-6)

	b.do(t, "RPUSH", "queue:bad", `{"enqueued_at":`)
	_, err = b.api.Queue("bad").Latency(ctx)
	require.ErrorContains(t, err, "latency of queue bad")
}

func TestAPIQueuePage(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	apiFillQueue(t, b, "default", 30)
	b.do(t, "LPUSH", "queue:default", "not json")

	page, size, err := b.api.Queue("default").Page(ctx, nil, 0, 0)
	require.NoError(t, err)
	require.EqualValues(t, 31, size)
	require.Len(t, page, 25)
	require.Nil(t, page[0].Job)
	require.Equal(t, []rubyjson.Value{rubyjson.StringValue("not json")}, page[0].Args())
	require.Equal(t, "", page[0].JID())
	require.Equal(t, "default", page[0].Queue)
	require.Equal(t, "j029", page[1].JID())
	require.Equal(t, "A", page[1].Class())

	page, size, err = b.api.Queue("default").Page(ctx, nil, 25, 10)
	require.NoError(t, err)
	require.EqualValues(t, 31, size)
	require.Len(t, page, 6)
	require.Equal(t, "j005", page[0].JID())
	require.Equal(t, "j000", page[5].JID())
	require.InDelta(t, 572.6651707, contract.Latency(page[5].Job, apiNow).Seconds(), 1e-6)

	_, _, err = b.api.Queue("default").Page(ctx, nil, -1, 0)
	require.Error(t, err)
}

func TestAPIQueueEachAndFind(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	apiFillQueue(t, b, "default", 120)
	q := b.api.Queue("default")

	var seen []string
	require.NoError(t, q.Each(ctx, func(r *api.JobRecord) error {
		seen = append(seen, r.JID())
		return nil
	}))
	require.Len(t, seen, 120)
	require.Equal(t, "j119", seen[0])
	require.Equal(t, "j000", seen[119])

	// Deleting every odd job while iterating visits each job exactly once
	// (Ruby's deleted_size adjustment).
	seen = nil
	require.NoError(t, q.Each(ctx, func(r *api.JobRecord) error {
		seen = append(seen, r.JID())
		if n, _ := r.Args()[0].Int(); n%2 == 1 {
			ok, err := q.DeleteJob(ctx, r.Value)
			require.NoError(t, err)
			require.True(t, ok)
		}
		return nil
	}))
	require.Len(t, seen, 120)
	n, err := q.Size(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 60, n)

	r, err := q.FindJob(ctx, "j042")
	require.NoError(t, err)
	require.Equal(t, "j042", r.JID())
	_, err = q.FindJob(ctx, "j043")
	require.ErrorIs(t, err, api.ErrJobNotFound)

	errBoom := fmt.Errorf("boom")
	require.ErrorIs(t, q.Each(ctx, func(*api.JobRecord) error { return errBoom }), errBoom)
}

func TestAPIQueueDeleteExactBytesAndClear(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	// A non-canonical member (spaces): only its exact bytes delete it.
	odd := `{ "class": "A", "args": [], "jid": "odd" }`
	b.do(t, "SADD", "queues", "default", "other")
	b.do(t, "RPUSH", "queue:default", odd, odd, `{"class":"A","args":[],"jid":"odd"}`)
	q := b.api.Queue("default")

	r, err := q.FindJob(ctx, "odd")
	require.NoError(t, err)
	require.Equal(t, odd, string(r.Value))
	ok, err := q.DeleteJob(ctx, r.Value)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []string{odd, `{"class":"A","args":[],"jid":"odd"}`}, b.strings(t, "LRANGE", "queue:default", 0, -1))

	ok, err = q.DeleteJob(ctx, []byte(`{"class":"A","args":[],"jid":"nope"}`))
	require.NoError(t, err)
	require.False(t, ok)

	require.NoError(t, q.Clear(ctx))
	require.Zero(t, b.int(t, "EXISTS", "queue:default"))
	require.Equal(t, []string{"other"}, b.strings(t, "SMEMBERS", "queues"))
}
