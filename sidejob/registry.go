package sidejob

import (
	"context"
	"errors"
	"fmt"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// Registry is the process-local worker registry (the classes that called
// register in Ruby), in registration order.
type Registry struct {
	classes []string
	entries map[string]*registered
}

type registered struct {
	worker Worker
	config *rubyjson.Map
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{entries: map[string]*registered{}} }

// Register adds a worker class with its config (nil means {}); registering
// a class again replaces it in place. Config keys SideJob reads are inports
// and outports ({name: {"default": v, "channels": [..]}}, "*" allowed) and
// status_publish; any other key is free-form metadata.
func (r *Registry) Register(class string, w Worker, config *rubyjson.Map) error {
	if class == "" {
		return errors.New("sidejob: empty worker class name")
	}
	if w == nil {
		return fmt.Errorf("sidejob: nil worker for %s", class)
	}
	if config == nil {
		config = rubyjson.NewMap()
	}
	for _, k := range []string{"inports", "outports"} {
		if v, ok := config.Get(k); ok {
			if _, err := portDefsFromJSON(v); err != nil {
				return fmt.Errorf("sidejob: %s config %s: %w", class, k, err)
			}
		}
	}
	if _, ok := r.entries[class]; !ok {
		r.classes = append(r.classes, class)
	}
	r.entries[class] = &registered{worker: w, config: config}
	return nil
}

// Classes returns the registered class names in order.
func (r *Registry) Classes() []string { return append([]string(nil), r.classes...) }

// Worker returns the worker of class, or nil.
func (r *Registry) Worker(class string) Worker {
	if e := r.entries[class]; e != nil {
		return e.worker
	}
	return nil
}

// Config returns the config of class, or nil.
func (r *Registry) Config(class string) *rubyjson.Map {
	if e := r.entries[class]; e != nil {
		return e.config
	}
	return nil
}

// ParseConfig parses a worker config written as JSON, keeping its key
// order (which is the order Ruby writes to workers:<queue>).
func ParseConfig(js string) (*rubyjson.Map, error) {
	m, err := rubyjson.ParseObject([]byte(js))
	if err != nil {
		return nil, fmt.Errorf("sidejob: worker config: %w", err)
	}
	return m, nil
}

// MustConfig is ParseConfig for literals in tests and examples; it panics
// on invalid JSON.
func MustConfig(js string) *rubyjson.Map {
	m, err := ParseConfig(js)
	if err != nil {
		panic(err)
	}
	return m
}

// RegisterAll writes the registry to workers:<queue>, replacing whatever
// was there (Worker.register_all: MULTI DEL + HSET), then publishes the
// whole registry {class: config} to /sidejob/workers/<queue> with port
// logging off. One process (Ruby or Go) should own a queue's registry.
func (c *Client) RegisterAll(ctx context.Context, queue string, r *Registry) error {
	key := WorkersKey(queue)
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
	return c.Group(ctx, &GroupOptions{Log: Opt(false)}, func(ctx context.Context) error {
		return c.Publish(ctx, WorkersChannel(queue), rubyjson.ObjectValue(all))
	})
}

// WorkerConfig returns the config of class in workers:<queue>, or nil when
// it is not registered (Worker.config).
func (c *Client) WorkerConfig(ctx context.Context, queue, class string) (*rubyjson.Map, error) {
	raw, err := redis.Bytes(c.do(ctx, "HGET", WorkersKey(queue), class))
	if errors.Is(err, redis.ErrNil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sidejob: worker config %s/%s: %w", queue, class, err)
	}
	m, err := rubyjson.ParseObject(raw)
	if err != nil {
		return nil, fmt.Errorf("sidejob: worker config %s/%s: %w", queue, class, err)
	}
	return m, nil
}
