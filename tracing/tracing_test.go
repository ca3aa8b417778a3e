package tracing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
	"github.com/gojob/gojob/tracing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rubyTraceparent is what Ruby's Sidekiq instrumentation leaves in a
// payload pushed inside a traced request (W3C traceparent, sampled).
const (
	rubyTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	rubySpanID      = "00f067aa0ba902b7"
	rubyTraceparent = "00-" + rubyTraceID + "-" + rubySpanID + "-01"
)

type bundle struct {
	exp  *tracetest.InMemoryExporter
	tr   *tracing.Tracing
	pool *redis.Pool
}

func setup(t *testing.T) *bundle {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return &bundle{exp: exp, tr: tracing.New(tp), pool: redistest.Start(t).Pool(t)}
}

// run starts a server with the extension and a handler for class.
func (b *bundle) run(t *testing.T, class string, h sidekiq.HandlerFunc) {
	srv, err := sidekiq.NewServer(&sidekiq.ServerConfig{Pool: b.pool, Concurrency: 1, DisablePoller: true,
		HeartbeatInterval: time.Hour, Queues: []wire.QueueWeight{{Name: "default"}}, Extensions: []sidekiq.Extension{b.tr}})
	require.NoError(t, err)
	srv.Handle(class, h, &sidekiq.HandlerOptions{Retry: 0})
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Stop(ctx)
	})
}

func (b *bundle) spans(t *testing.T, n int) tracetest.SpanStubs {
	require.Eventually(t, func() bool { return len(b.exp.GetSpans()) >= n }, 10*time.Second, 5*time.Millisecond)
	return b.exp.GetSpans()
}

// A payload pushed by Ruby with a traceparent: the job's consumer span
// continues that trace, as the child of Ruby's span, and the handler's
// context (what exec and HTTP handlers pass on) carries the consumer span.
func TestConsumerSpanContinuesPayloadTraceparent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	conn := b.pool.Get()
	defer conn.Close()
	_, err := conn.Do("LPUSH", "queue:default", `{"retry":false,"queue":"default","class":"RubyPushed","args":[1],"jid":"b4a577edbccf1d805744efa9","created_at":1700000000.1,"enqueued_at":1700000000.2,"traceparent":"`+rubyTraceparent+`"}`)
	require.NoError(t, err)
	got := make(chan string, 1)
	b.run(t, "RubyPushed", func(ctx context.Context, job *wire.Job) error {
		got <- tracing.Traceparent(ctx)
		return errors.New("boom")
	})
	tp := <-got
	span := b.spans(t, 1)[0]
	require.Equal(t, "default process", span.Name)
	require.Equal(t, trace.SpanKindConsumer, span.SpanKind)
	require.Equal(t, rubyTraceID, span.SpanContext.TraceID().String())
	require.Equal(t, rubySpanID, span.Parent.SpanID().String(), "child of the span that pushed the job")
	require.True(t, span.Parent.IsRemote())
	require.Equal(t, "00-"+rubyTraceID+"-"+span.SpanContext.SpanID().String()+"-01", tp, "handlers get the job's span")
	require.Equal(t, codes.Error, span.Status.Code)
	attrs := map[string]string{}
	for _, a := range span.Attributes {
		attrs[string(a.Key)] = a.Value.AsString()
	}
	require.Equal(t, "b4a577edbccf1d805744efa9", attrs["messaging.message.id"])
	require.Equal(t, "RubyPushed", attrs["messaging.sidekiq.job_class"])
}

// A Go push inside a span: the producer span is its child, the payload
// carries the producer span, and the job's consumer span is that one's
// child: one trace from the request to the job.
func TestProducerSpanLinksPushToRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: b.pool, Extensions: []sidekiq.Extension{b.tr}})
	require.NoError(t, err)
	tp := sdktrace.NewTracerProvider()
	ctx, request := tp.Tracer("test").Start(context.Background(), "request")
	res, err := client.Enqueue(ctx, "", "GoPushed", 1)
	require.NoError(t, err)
	request.End()
	job, err := wire.ParseJob(res.Payload)
	require.NoError(t, err)
	v, _ := job.Get("traceparent")
	payloadTP, _ := v.Str()

	producer := b.spans(t, 1)[0]
	require.Equal(t, "default publish", producer.Name)
	require.Equal(t, trace.SpanKindProducer, producer.SpanKind)
	require.Equal(t, request.SpanContext().SpanID(), producer.Parent.SpanID())
	require.Equal(t, request.SpanContext().TraceID(), producer.SpanContext.TraceID())
	require.Equal(t, "00-"+producer.SpanContext.TraceID().String()+"-"+producer.SpanContext.SpanID().String()+"-01", payloadTP)

	done := make(chan struct{})
	b.run(t, "GoPushed", func(ctx context.Context, job *wire.Job) error { close(done); return nil })
	<-done
	spans := b.spans(t, 2)
	consumer := spans[1]
	require.Equal(t, producer.SpanContext.SpanID(), consumer.Parent.SpanID())
	require.Equal(t, producer.SpanContext.TraceID(), consumer.SpanContext.TraceID())
	require.Equal(t, codes.Unset, consumer.Status.Code)

	// A push again without a span in ctx (the retry or schedule poller)
	// continues the trace the payload carries.
	_, err = client.Push(context.Background(), job, &sidekiq.PushOpts{Repush: true})
	require.NoError(t, err)
	again := b.spans(t, 3)[2]
	require.Equal(t, producer.SpanContext.SpanID(), again.Parent.SpanID())
}

func TestTraceparentWithoutSpan(t *testing.T) {
	t.Parallel()
	require.Empty(t, tracing.Traceparent(context.Background()))
}
