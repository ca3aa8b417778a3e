package sidejob

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/rubytest"
	"github.com/gojob/gojob/internal/sidejobwire"
)

// TestRubyInterop checks the data against real Ruby (Sidekiq 6.4.1 and
// Ruby's JSON and Time, which the gem uses): Ruby finds the Go-pushed item
// by its integer jid (the gem's duplicate check), parses the job keys and
// envelopes, and writes data the Go side reads.
func TestRubyInterop(t *testing.T) {
	rubytest.Require(t)
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := srv.Pool(t)
	c, err := NewClient(&Config{Pool: pool})
	require.NoError(t, err)
	reg := &Registry{}
	require.NoError(t, reg.Register("TestSum", testSum{}, `{"inports":{"ready":{},"in":{}},"outports":{"sum":{}}}`))
	require.NoError(t, c.registerAll(ctx, "testq", reg))
	j, err := c.Queue(ctx, "testq", "TestSum", &QueueOpts{Args: []any{"é", 1.5}})
	require.NoError(t, err)
	in, err := j.Input(ctx, "in")
	require.NoError(t, err)
	require.NoError(t, in.Write(withContext(ctx, "user", "ü"), map[string]any{"k": "☃"}))

	out := rubytest.Run(t, srv.URL(), `
q = Sidekiq::Queue.new('testq')
item = q.find_job(1)
puts item.nil? ? 'missing' : "found #{item.klass} retry=#{item.item['retry'].inspect} args=#{item.args.to_json}"
w = Sidekiq.redis { |r| JSON.parse(r.get('job:1:worker')) }
puts w.to_json
env = Sidekiq.redis { |r| JSON.parse(r.lindex('job:1:in:in', 0)) }
puts env['data'].to_json, env['context'].to_json
puts Sidekiq.redis { |r| r.get('job:1:status') }
puts Time.at(1700000000, 123456789, :nsec).utc.iso8601(9)
Sidekiq.redis do |r|
  r.rpush('job:1:in:in', {data: {'x' => [1, nil]}, context: {job: 5}}.to_json)
  r.hset('job:1:state', 'k', ['é', 2.0].to_json)
  r.set('job:1:ran_at', Time.now.utc.iso8601(9))
end
`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Equal(t, []string{
		`found TestSum retry=false args=["é",1.5]`,
		`{"queue":"testq","class":"TestSum","args":["é",1.5]}`,
		`{"k":"☃"}`,
		`{"user":"ü"}`,
		`queued`,
		sidejobwire.Timestamp(time.Unix(1700000000, 123456789)),
	}, lines)

	_, err = in.Read(ctx)
	require.NoError(t, err)
	d, err := in.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, `{"x":[1,null]}`, string(d.Value.Encode()))
	require.Equal(t, `{"job":5}`, string(d.Context.Encode()))
	v, _, err := j.get(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, `["é",2.0]`, string(v.Encode()))
	info, err := j.Info(ctx)
	require.NoError(t, err)
	ran, err := sidejobwire.ParseTimestamp(info.RanAt)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), ran, time.Minute)
}
