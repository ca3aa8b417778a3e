package cli

import (
	"context"
	"time"

	"github.com/rs/zerolog"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/tracing"
)

// setupTracing adds OpenTelemetry spans to ext's clients and servers when
// the OTEL_* environment asks for traces (docs/tracing.md), and returns
// what flushes the spans left at exit. Call it before setupDurable, so
// that a durable row records the payload with its traceparent.
func setupTracing(ctx context.Context, log zerolog.Logger, ext ...interface{ Extend(...sidekiq.Extension) }) (stop func(), err error) {
	tr, shutdown, err := tracing.FromEnv(ctx)
	if err != nil {
		return func() {}, ucli.Exit(err.Error(), exitUsage)
	}
	if tr == nil {
		return func() {}, nil
	}
	for _, e := range ext {
		e.Extend(tr)
	}
	log.Info().Msg("OpenTelemetry traces enabled")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			log.Warn().Err(err).Str("component", "tracing").Msg("flushing the last spans")
		}
	}, nil
}
