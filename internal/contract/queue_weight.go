package contract

import (
	"fmt"
	"strings"

	"github.com/gojob/gojob/sidekiq/wire"
)

// ParseQueueWeight reads "name" or "name,weight".
func ParseQueueWeight(s string) (wire.QueueWeight, error) {
	name, w, found := strings.Cut(s, ",")
	if name == "" {
		return wire.QueueWeight{}, fmt.Errorf("sidekiq: empty queue name in %q", s)
	}
	q := wire.QueueWeight{Name: name}
	if found {
		if _, err := fmt.Sscan(w, &q.Weight); err != nil || q.Weight < 0 {
			return wire.QueueWeight{}, fmt.Errorf("sidekiq: bad queue weight in %q", s)
		}
	}
	return q, nil
}
