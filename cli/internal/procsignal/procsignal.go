// Package procsignal sends a signal to a live Sidekiq process by identity,
// for `gojob quiet`, `gojob stop` and `gojob top`.
package procsignal

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
)

// ErrNotLive is Send's error for an identity that is not a live process.
var ErrNotLive = errors.New("sidekiq: no live process with this identity")

// signalLive pushes a signal only when the process hash (the heartbeat's
// <identity> key, with its info field, which expires 60 s after the last
// beat) exists: the check and the write are one step, so a signal for a
// process that is gone leaves no <identity>-signals key behind.
var (
	//go:embed lua/signal_live.lua
	signalLiveLua string
	signalLive    = redis.NewScript(2, signalLiveLua)
)

// Send sends a signal name to a live process by identity: "TSTP", "TERM"
// or "TTIN", as api.Process's Quiet, Stop and DumpThreads send them.
// Unlike those it refuses (ErrNotLive) an identity whose heartbeat hash
// does not exist instead of writing its signals list: a mistyped identity
// is reported, not silently queued for no one.
func Send(ctx context.Context, pool *redis.Pool, identity, sig string) error {
	conn, err := pool.GetContext(ctx)
	if err != nil {
		return fmt.Errorf("sidekiq: signal process: %w", err)
	}
	defer conn.Close()
	ok, err := redis.Bool(signalLive.DoContext(ctx, conn, identity, contract.SignalsKey(identity), sig))
	if err != nil {
		return fmt.Errorf("sidekiq: signal %s to %s: %w", sig, identity, err)
	}
	if !ok {
		return fmt.Errorf("%w: %s", ErrNotLive, identity)
	}
	return nil
}
