package sidejob

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// Registry is the process-local worker registry (the classes that called
// register in Ruby), in registration order, and how ServerSetup serves
// them. The zero value is an empty registry.
type Registry struct {
	// Logger receives the runtime's logs (not the SideJob log channel).
	Logger zerolog.Logger
	// ReapInterval, when positive, is how often the server looks for jobs
	// left running by a dead process and queues them again
	// (docs/sidejob.md#weakness-3-job-stuck-in-running).
	ReapInterval time.Duration

	classes []string
	entries map[string]*registered
}

type registered struct {
	worker Worker
	config *rubyjson.Map
}

// Register adds a worker class with its config, a JSON object ("" means
// {}) whose key order is kept (it is the order written to
// workers:<queue>); registering a class again replaces it in place. Config
// keys SideJob reads are inports and outports ({name: {"default": v,
// "channels": [..]}}, "*" allowed) and status_publish; any other key is
// free-form metadata.
func (r *Registry) Register(class string, w Worker, config string) error {
	if class == "" {
		return errors.New("sidejob: empty worker class name")
	}
	if w == nil {
		return fmt.Errorf("sidejob: nil worker for %s", class)
	}
	cfg := rubyjson.NewMap()
	if config != "" {
		var err error
		if cfg, err = rubyjson.ParseObject([]byte(config)); err != nil {
			return fmt.Errorf("sidejob: %s config: %w", class, err)
		}
	}
	for _, k := range []string{"inports", "outports"} {
		if v, ok := cfg.Get(k); ok {
			if _, err := portDefsFromJSON(v); err != nil {
				return fmt.Errorf("sidejob: %s config %s: %w", class, k, err)
			}
		}
	}
	if r.entries == nil {
		r.entries = map[string]*registered{}
	}
	if _, ok := r.entries[class]; !ok {
		r.classes = append(r.classes, class)
	}
	r.entries[class] = &registered{worker: w, config: cfg}
	return nil
}

// classNames returns the registered class names in order.
func (r *Registry) classNames() []string { return append([]string(nil), r.classes...) }

// workerFor returns the worker of class, or nil.
func (r *Registry) workerFor(class string) Worker {
	if e := r.entries[class]; e != nil {
		return e.worker
	}
	return nil
}

// registerAll writes the registry to workers:<queue>, replacing whatever
// was there (Worker.register_all: MULTI DEL + HSET), then publishes the
// whole registry {class: config} to /sidejob/workers/<queue> with port
// logging off. One process (Ruby or Go) should own a queue's registry.
func (c *Client) registerAll(ctx context.Context, queue string, r *Registry) error {
	key := sidejobwire.WorkersKey(queue)
	cmds := []cmd{command("DEL", key)}
	all := rubyjson.NewMap()
	if len(r.classes) > 0 {
		args := []any{key}
		for _, cl := range r.classes {
			cfg := r.entries[cl].config
			args = append(args, cl, cfg.Encode())
			all.Set(cl, rubyjson.ObjectValue(cfg))
		}
		cmds = append(cmds, command("HSET", args...))
	}
	if _, err := c.multi(ctx, cmds...); err != nil {
		return fmt.Errorf("sidejob: register workers of %s: %w", queue, err)
	}
	return c.inGroup(ctx, &groupOptions{Log: opt(false)}, func(ctx context.Context) error {
		return c.Publish(ctx, sidejobwire.WorkersChannel(queue), rubyjson.ObjectValue(all))
	})
}
