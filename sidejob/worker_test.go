package sidejob

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// worker_spec.rb
func TestRegistry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.do(t, "HSET", "workers:testq", "Stale", "{}")
	sub := b.subscribe(t)
	reg := &Registry{}
	require.NoError(t, reg.Register("A", workerFunc(nil), `{"description":"x"}`))
	require.NoError(t, reg.Register("B", workerFunc(nil), ""))
	require.Error(t, reg.Register("C", workerFunc(nil), `{"inports":[]}`))
	require.ErrorContains(t, reg.Register("D", workerFunc(nil), `{"x":`), "D config")
	require.NoError(t, b.c.registerAll(ctx, "testq", reg))
	require.Equal(t, map[string]string{"A": `{"description":"x"}`, "B": "{}"}, b.hash(t, "workers:testq"), "replaced")
	require.Equal(t, []string{`/sidejob/workers/testq  {"A":{"description":"x"},"B":{}}`}, normalize(sub.stop(t, b)))
	cfg, err := b.c.workerConfig(ctx, "testq", "A")
	require.NoError(t, err)
	require.Equal(t, `{"description":"x"}`, string(cfg.Encode()))
	cfg, err = b.c.workerConfig(ctx, "testq", "Nope")
	require.NoError(t, err)
	require.Nil(t, cfg)
	require.True(t, errors.Is(Suspend(), errSuspended))
}

// forInputsWorker records the rows for_inputs yields and writes their sum.
type forInputsWorker struct{ rows []string }

func (w *forInputsWorker) Perform(ctx context.Context, j *Job, _ []rubyjson.Value) error {
	out, err := j.Output(ctx, "out")
	if err != nil {
		return err
	}
	return j.ForInputs(ctx, []string{"a", "b"}, func(ctx context.Context, vals []rubyjson.Value) error {
		w.rows = append(w.rows, string(rubyjson.ArrayValue(vals...).Encode()))
		x, _ := vals[0].Int()
		y, _ := vals[1].Int()
		return out.Write(ctx, x+y)
	})
}

func TestForInputs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	w := &forInputsWorker{}
	b.register(t, "FI", w, `{"inports":{"a":{},"b":{}},"outports":{"out":{}}}`)
	j := b.queue(t, "FI", nil)
	a, bb, out := b.input(t, j, "a"), b.input(t, j, "b"), b.output(t, j, "out")
	require.NoError(t, b.rt.runInline(ctx, j, nil))
	require.Empty(t, w.rows, "no data: no yield")
	require.Equal(t, "completed", b.status(t, j))

	b.write(t, a, 1, 2, 3)
	b.write(t, bb, 10, 20)
	sub := b.subscribe(t)
	require.NoError(t, b.rt.runInline(ctx, j, nil))
	require.Equal(t, []string{"[1,10]", "[2,20]"}, w.rows, "rows in order")
	require.Equal(t, "suspended", b.status(t, j), "partial input after the complete rows")
	require.Equal(t, []string{
		`/sidejob/job/1  {"status":"running"}`,
		`/sidejob/log  {"job":1,"timestamp":"…","read":[{"job":1,"data":[1],"inport":"a"},{"job":1,"data":[10],"inport":"b"}],"write":[{"job":1,"data":[11],"outport":"out"}]}`,
		`/sidejob/log  {"job":1,"timestamp":"…","read":[{"job":1,"data":[2],"inport":"a"},{"job":1,"data":[20],"inport":"b"}],"write":[{"job":1,"data":[22],"outport":"out"}]}`,
		`/sidejob/job/1  {"status":"suspended"}`,
	}, normalize(sub.stop(t, b)), "one log entry per row")

	// mixing defaults with data
	require.NoError(t, bb.SetDefault(ctx, 100))
	require.NoError(t, b.rt.runInline(ctx, j, nil))
	require.Equal(t, "[3,100]", w.rows[2])
	require.Equal(t, "completed", b.status(t, j))

	// only defaults: yield once, outputs become defaults
	require.NoError(t, a.SetDefault(ctx, 5))
	w.rows = nil
	require.NoError(t, b.rt.runInline(ctx, j, nil))
	require.Equal(t, []string{"[5,100]"}, w.rows)
	d, err := out.defaultData(ctx)
	require.NoError(t, err)
	require.Equal(t, "105", string(d.Value.Encode()))
	require.NoError(t, b.rt.runInline(ctx, j, nil))
	require.Len(t, w.rows, 1, "same defaults: no second yield")
	require.NoError(t, a.SetDefault(ctx, 6))
	require.NoError(t, b.rt.runInline(ctx, j, nil))
	require.Equal(t, []string{"[5,100]", "[6,100]"}, w.rows, "a changed default yields again")

	// defaults plus an empty port without default: no yield
	require.NoError(t, a.SetDefault(ctx, (*Data)(nil)))
	w.rows = nil
	require.NoError(t, b.rt.runInline(ctx, j, nil))
	require.Empty(t, w.rows)
	// nil defaults are defaults
	require.NoError(t, a.SetDefault(ctx, nil))
	b.write(t, bb, 1)
	require.NoError(t, b.rt.runInline(ctx, j, nil))
	require.Equal(t, []string{"[null,1]", "[null,100]"}, w.rows, "the row, then the (new) defaults once")
}
