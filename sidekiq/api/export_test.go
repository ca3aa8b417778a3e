package api

import (
	"context"

	"github.com/gojob/gojob/internal/contract"
)

// SignalProcess sends a signal to any identity, live or not, for the tests.
func SignalProcess(ctx context.Context, a *API, identity, sig string) error {
	return a.signalProcess(ctx, identity, sig)
}

// CleanupProcesses runs the cleanup API.Processes runs first, for the
// tests.
func CleanupProcesses(ctx context.Context, a *API) (*contract.CleanupResult, error) {
	return a.cleanupProcesses(ctx)
}
