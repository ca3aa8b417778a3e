// Package fetchflag reads the fetch mode the command line's --fetch
// names.
package fetchflag

import (
	"fmt"
	"strings"

	"github.com/gojob/gojob/sidekiq"
)

// Parse reads "reliable", "basic" (or "brpop") or "batch" (or
// "blmpop"); "" is basic. sidekiq.FetchMode.String writes these names.
func Parse(s string) (sidekiq.FetchMode, error) {
	switch strings.ToLower(s) {
	case "", "brpop", "basic":
		return sidekiq.FetchBRPOP, nil
	case "batch", "blmpop":
		return sidekiq.FetchBatch, nil
	case "reliable":
		return sidekiq.FetchReliable, nil
	case "reliable-batch":
		return 0, fmt.Errorf("sidekiq: fetch mode %q is gone: reliable now takes the jobs of all idle slots in one call", s)
	}
	return 0, fmt.Errorf("sidekiq: unknown fetch mode %q (want reliable, basic or batch)", s)
}
