// Package fetchmode reads the names of the fetch modes
// (sidekiq.ServerConfig.Fetch, gojob work --fetch).
package fetchmode

import (
	"fmt"
	"strings"
)

// The modes' names.
const (
	Basic    = "basic"
	Batch    = "batch"
	Reliable = "reliable"
)

// Parse returns the name of the mode s names: Reliable for "reliable",
// Basic for "basic", "brpop" or "", Batch for "batch" or "blmpop"
// (any case).
func Parse(s string) (string, error) {
	switch strings.ToLower(s) {
	case "", "brpop", "basic":
		return Basic, nil
	case "batch", "blmpop":
		return Batch, nil
	case "reliable":
		return Reliable, nil
	case "reliable-batch":
		return "", fmt.Errorf("sidekiq: fetch mode %q is gone: reliable now takes the jobs of all idle slots in one call", s)
	}
	return "", fmt.Errorf("sidekiq: unknown fetch mode %q (want reliable, basic or batch)", s)
}
