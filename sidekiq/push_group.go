package sidekiq

import (
	"context"
	"sync"
)

// PushGroup is the set of jobs one PushBulk round trip writes to Redis
// (up to 1000). A client middleware that would otherwise make one write
// of its own per job (durable rows, for example) can attach a hook to the
// group instead, gather what the jobs need while their middleware runs,
// and do it once for the group: PushBulk calls every hook after the
// middleware of the group's last job and before its Redis write. A hook
// that returns an error aborts the push of the group, as a middleware
// error does.
type PushGroup struct {
	mu    sync.Mutex
	hooks map[any]PushGroupHook
	order []any
}

// PushGroupHook is the work a middleware attached to a PushGroup.
type PushGroupHook interface {
	// BeforeWrite runs once, before the group is written to Redis.
	BeforeWrite(ctx context.Context) error
}

type pushGroupKey struct{}

// PushGroupFrom returns the group a job belongs to when ctx is the
// context a client middleware received from PushBulk, nil for a single
// push.
func PushGroupFrom(ctx context.Context) *PushGroup {
	g, _ := ctx.Value(pushGroupKey{}).(*PushGroup)
	return g
}

// Attach returns the group's hook for key, made by create on first use.
func (g *PushGroup) Attach(key any, create func() PushGroupHook) PushGroupHook {
	g.mu.Lock()
	defer g.mu.Unlock()
	if h, ok := g.hooks[key]; ok {
		return h
	}
	if g.hooks == nil {
		g.hooks = map[any]PushGroupHook{}
	}
	h := create()
	g.hooks[key] = h
	g.order = append(g.order, key)
	return h
}

// beforeWrite runs the hooks in the order they were attached.
func (g *PushGroup) beforeWrite(ctx context.Context) error {
	g.mu.Lock()
	hooks := make([]PushGroupHook, 0, len(g.order))
	for _, k := range g.order {
		hooks = append(hooks, g.hooks[k])
	}
	g.mu.Unlock()
	for _, h := range hooks {
		if err := h.BeforeWrite(ctx); err != nil {
			return err
		}
	}
	return nil
}
