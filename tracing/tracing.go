// Package tracing traces Sidekiq jobs with OpenTelemetry: a producer span
// per pushed job and a consumer span per run, joined through the W3C
// traceparent that the payload carries. It is a sidekiq.Extension; see
// docs/tracing.md.
//
// Ruby's OpenTelemetry Sidekiq instrumentation
// (opentelemetry-instrumentation-sidekiq, its client middleware) injects
// the trace context into the job hash itself, so a payload pushed by a
// traced Rails request carries top-level "traceparent" (and "tracestate")
// keys. gojob reads and writes the same keys, so a trace runs from a Rails
// request through a Go job and on into the job's exec child (TRACEPARENT)
// or HTTP handler (a traceparent header), and from a Go push into a Ruby
// worker.
//
//	tr, shutdown, err := tracing.FromEnv(ctx) // OTLP over HTTP, OTEL_* variables
//	defer shutdown(context.Background())
//	srv.Extend(tr)    // consumer spans, and producer spans of in-job pushes
//	client.Extend(tr) // producer spans
package tracing

import (
	"context"
	"errors"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// instrumentation names the tracer.
const instrumentation = "github.com/gojob/gojob/tracing"

// The payload keys of the trace context: the W3C names, as Ruby's
// instrumentation injects them into the job hash.
const (
	keyTraceparent = "traceparent"
	keyTracestate  = "tracestate"
)

// Tracing is the sidekiq.Extension that makes the spans. Add it to every
// client and server, before other extensions (a durable row then records
// the payload with its traceparent).
type Tracing struct {
	tracer trace.Tracer
	prop   propagation.TraceContext
}

var _ sidekiq.Extension = (*Tracing)(nil)

// New returns a Tracing whose spans tp makes; nil means the global
// provider (otel.GetTracerProvider).
func New(tp trace.TracerProvider) *Tracing {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Tracing{tracer: tp.Tracer(instrumentation)}
}

// FromEnv returns a Tracing exporting with OTLP over HTTP when the
// environment asks for traces, with shutdown, which flushes the spans
// left; nil and a no-op shutdown otherwise. Traces are off unless
// OTEL_TRACES_EXPORTER is "otlp" or OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; OTEL_SDK_DISABLED=true and
// OTEL_TRACES_EXPORTER=none turn them off. The exporter, the sampler
// (OTEL_TRACES_SAMPLER), the batching (OTEL_BSP_*) and the resource
// (OTEL_SERVICE_NAME, default "gojob", OTEL_RESOURCE_ATTRIBUTES) read the
// standard variables.
func FromEnv(ctx context.Context) (*Tracing, func(context.Context) error, error) {
	noop := func(context.Context) error { return nil }
	if !enabled() {
		return nil, noop, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, noop, errors.Join(errors.New("tracing: OTLP exporter"), err)
	}
	res, err := resource.Merge(resource.NewSchemaless(attribute.String("service.name", "gojob")), resource.Default())
	if err != nil {
		res = resource.Default()
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return New(tp), tp.Shutdown, nil
}

func enabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))) {
	case "none":
		return false
	case "otlp":
		return true
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// jobCarrier is a payload as a propagation carrier.
type jobCarrier struct{ job *wire.Job }

func (c jobCarrier) Get(key string) string {
	v, ok := c.job.Get(key)
	if !ok {
		return ""
	}
	s, _ := v.Str()
	return s
}

func (c jobCarrier) Set(key, value string) { c.job.Set(key, rubyjson.StringValue(value)) }

func (c jobCarrier) Keys() []string { return []string{keyTraceparent, keyTracestate} }

// attributes are a job's span attributes (OpenTelemetry's messaging
// conventions, with Ruby's instrumentation's job class attribute).
func attributes(job *wire.Job, op string) trace.SpanStartEventOption {
	return trace.WithAttributes(
		attribute.String("messaging.system", "sidekiq"),
		attribute.String("messaging.operation", op),
		attribute.String("messaging.destination.name", job.Queue()),
		attribute.String("messaging.message.id", job.JID()),
		attribute.String("messaging.sidekiq.job_class", job.Class()),
	)
}

// BeforePush makes a producer span per job ("<queue> publish"), the child
// of ctx's span, or, when ctx has none, of the traceparent the job
// already carries (a scheduled or retried job pushed again, an outbox row
// written by a traced request); its context replaces the job's
// traceparent and tracestate.
func (t *Tracing) BeforePush(ctx context.Context, jobs []*wire.Job) error {
	for _, job := range jobs {
		parent := ctx
		if !trace.SpanContextFromContext(ctx).IsValid() {
			parent = t.prop.Extract(ctx, jobCarrier{job})
		}
		sctx, span := t.tracer.Start(parent, job.Queue()+" publish",
			trace.WithSpanKind(trace.SpanKindProducer), attributes(job, "publish"))
		job.Delete(keyTracestate)
		t.prop.Inject(sctx, jobCarrier{job})
		span.End()
	}
	return nil
}

// Run makes the job's consumer span ("<queue> process"), the child of
// the traceparent its payload carries, around the rest of the chain; an
// error or a panic marks it failed. The handler's context carries the
// span: Traceparent gives it to exec and HTTP handlers.
func (t *Tracing) Run(ctx context.Context, r *sidekiq.Run, next func(context.Context) error) (err error) {
	job := r.Job
	parent := t.prop.Extract(ctx, jobCarrier{job})
	ctx, span := t.tracer.Start(parent, job.Queue()+" process",
		trace.WithSpanKind(trace.SpanKindConsumer), attributes(job, "process"))
	defer func() {
		if p := recover(); p != nil {
			span.SetStatus(codes.Error, "panic")
			span.End()
			panic(p)
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	return next(ctx)
}

// Traceparent returns the W3C traceparent of ctx's span, "" when ctx has
// no valid span (tracing off).
func Traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c.Get(keyTraceparent)
}
