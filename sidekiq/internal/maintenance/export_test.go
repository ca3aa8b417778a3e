package maintenance

import (
	"context"
	"time"
)

// The poller tests live in maintenance_test so that they can push through
// a real sidekiq.Client; these expose what they drive.

// RunOnce runs one poll pass.
func (p *Poller) RunOnce(ctx context.Context) (*PollResult, error) { return p.runOnce(ctx) }

// NextSleep computes one poll wait.
func (p *Poller) NextSleep(ctx context.Context) time.Duration { return p.sleep(ctx) }

// StartupCleanup runs the cleanup of the end of the initial wait.
func (p *Poller) StartupCleanup(ctx context.Context) { p.cleaner.startup(ctx) }
