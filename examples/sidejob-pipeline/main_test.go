package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
)

func TestPipeline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, srv.URL(), 4, false, &out))
	require.Contains(t, out.String(), "sum of squares of 1..4 = 30")
}

// TestPipelineMiniredis runs it on the embedded server of `gojob dev`.
func TestPipelineMiniredis(t *testing.T) {
	t.Parallel()
	m, _ := redistest.Mini(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, "redis://"+m.Addr()+"/0", 3, false, &out))
	require.Contains(t, out.String(), "sum of squares of 1..3 = 14")
}
