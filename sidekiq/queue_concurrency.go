package sidekiq

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/gojob/gojob/sidekiq/internal/fetch"
)

// queueCaps caps how many of a process's slots run jobs of a queue at
// once (ServerConfig.QueueConcurrency): the idea of Sidekiq 7's capsules
// (a queue with its own concurrency inside one process) on the slots the
// process already has. A capped queue that runs its cap is full: the
// fetch skips it, as a paused queue (fetch.Order.SetFull), so the other
// slots take the other queues; a job of it that a fetch already under way
// pops meanwhile goes back to the pop end of its queue, not started.
type queueCaps struct {
	order *fetch.Order
	limit map[string]int // read only after newQueueCaps

	mu      sync.Mutex
	running map[string]int
}

// newQueueCaps returns the caps of limit on order, or nil when there are
// none.
func newQueueCaps(limit map[string]int, order *fetch.Order) *queueCaps {
	if len(limit) == 0 {
		return nil
	}
	return &queueCaps{order: order, limit: limit, running: map[string]int{}}
}

// enter counts a job of queue as running and reports true, or reports
// false when the queue runs its cap already. The count, not the fetch's
// skip, keeps the cap: fetches under way when the queue filled may pop
// more of its jobs.
func (c *queueCaps) enter(queue string) bool {
	if c == nil {
		return true
	}
	limit, ok := c.limit[queue]
	if !ok {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.running[queue]
	if n >= limit {
		return false
	}
	c.running[queue] = n + 1
	if n+1 == limit {
		c.order.SetFull(queue, true)
	}
	return true
}

// leave counts a job of queue as done (after an enter that reported true).
func (c *queueCaps) leave(queue string) {
	if c == nil {
		return
	}
	limit, ok := c.limit[queue]
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.running[queue] - 1
	c.running[queue] = n
	if n == limit-1 {
		c.order.SetFull(queue, false)
	}
}

// String lists the caps for the start log: "mail=2,reports=1".
func (c *queueCaps) String() string {
	if c == nil {
		return ""
	}
	parts := make([]string, 0, len(c.limit))
	for q, n := range c.limit {
		parts = append(parts, fmt.Sprintf("%s=%d", q, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}
