package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/sidekiq/sidekiqtest"
	"github.com/gojob/gojob/sidekiq/typed"
)

// Fake mode: the push Ruby's HardJob.perform_async("bob", 5) makes is
// captured, then run by hardJob.
func TestHardJobFake(t *testing.T) {
	f := sidekiqtest.NewFake(t)
	ctx := context.Background()
	_, err := f.Client().Enqueue(ctx, "", "HardJob", "bob", 5)
	require.NoError(t, err)
	a := sidekiqtest.RequirePushed(t, f, "HardJob", &sidekiqtest.Want{Args: []any{HardJobArgs{Name: "bob", Count: 5}}, Queue: "default"})
	require.NotEmpty(t, a.JID())
	f.Handle("HardJob", typed.Handler(hardJob))
	require.NoError(t, f.Drain(ctx))
}

// Inline mode: hardJob runs during the push; a payload that does not fit
// its arguments is the push's error.
func TestHardJobInline(t *testing.T) {
	f := sidekiqtest.NewFake(t)
	f.Inline = true
	f.Handle("HardJob", typed.Handler(hardJob))
	ctx := context.Background()
	job, err := typed.NewJob("HardJob", HardJobArgs{Name: "bob", Count: 5})
	require.NoError(t, err)
	_, err = f.Client().Push(ctx, job, nil)
	require.NoError(t, err)
	_, err = f.Client().Enqueue(ctx, "", "HardJob", "bob", "five")
	require.EqualError(t, err, `typed: HardJob args[1] (HardJobArgs.Count): cannot decode string "five" into int`)
}
