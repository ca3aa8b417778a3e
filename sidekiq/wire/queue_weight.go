package wire

import (
	"fmt"
	"strings"
)

// QueueWeight is one -q entry: a queue and its weight (0 = no weight
// given). The process info's "queues" and "weights" are written from it.
type QueueWeight struct {
	Name   string
	Weight int
}

// ParseQueueWeight reads "name" or "name,weight".
func ParseQueueWeight(s string) (QueueWeight, error) {
	name, w, found := strings.Cut(s, ",")
	if name == "" {
		return QueueWeight{}, fmt.Errorf("sidekiq: empty queue name in %q", s)
	}
	q := QueueWeight{Name: name}
	if found {
		if _, err := fmt.Sscan(w, &q.Weight); err != nil || q.Weight < 0 {
			return QueueWeight{}, fmt.Errorf("sidekiq: bad queue weight in %q", s)
		}
	}
	return q, nil
}
