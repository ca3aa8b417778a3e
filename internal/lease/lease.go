// Package lease is the one Redis lease of gojob's features: a key whose
// value names its holder and whose time to live bounds how long a holder
// that stops renewing it keeps it. The durable reconciler's leader, the
// dashboard's bulk actions, the batch dead-set watch and SideJob's job
// locks use it.
//
// Take and Acquire never wait: a caller that does not get the lease tries
// again at its next pass. Renew and Release act only for the holder that
// has the lease (compare-and-set, compare-and-delete), so a holder whose
// lease expired and was taken by another never ends the other's.
package lease

import (
	"context"
	_ "embed"
	"errors"
	"time"

	"github.com/gomodule/redigo/redis"
)

var (
	//go:embed lua/acquire.lua
	acquireLua string
	//go:embed lua/renew.lua
	renewLua string
	//go:embed lua/release.lua
	releaseLua string

	acquireScript = redis.NewScript(1, acquireLua)
	renewScript   = redis.NewScript(1, renewLua)
	releaseScript = redis.NewScript(1, releaseLua)
)

// Take takes the lease key for holder for ttl if nobody holds it (SET NX
// PX): a holder that has it already does not get it again. It reports
// whether holder took it.
func Take(ctx context.Context, conn redis.Conn, key, holder string, ttl time.Duration) (bool, error) {
	_, err := redis.String(redis.DoContext(conn, ctx, "SET", key, holder, "NX", "PX", ttl.Milliseconds()))
	if errors.Is(err, redis.ErrNil) {
		return false, nil
	}
	return err == nil, err
}

// Acquire takes the lease key for holder for ttl if it is free, or renews
// it if holder has it. It reports whether holder holds it now.
func Acquire(ctx context.Context, conn redis.Conn, key, holder string, ttl time.Duration) (bool, error) {
	return redis.Bool(acquireScript.DoContext(ctx, conn, key, holder, ttl.Milliseconds()))
}

// Renew gives the lease key another ttl if holder still has it, and
// reports whether it did.
func Renew(ctx context.Context, conn redis.Conn, key, holder string, ttl time.Duration) (bool, error) {
	return redis.Bool(renewScript.DoContext(ctx, conn, key, holder, ttl.Milliseconds()))
}

// Release ends the lease key if holder has it, and reports whether it did.
func Release(ctx context.Context, conn redis.Conn, key, holder string) (bool, error) {
	return redis.Bool(releaseScript.DoContext(ctx, conn, key, holder))
}
