package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/sidekiq/api"
)

// filterFlags select jobs of a listing or a bulk action by class, jid and
// error text.
func filterFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "class", Usage: "only jobs of this `CLASS`: the class, an ActiveJob's wrapped class, or a mailer job's mailer (or Mailer#method)"},
		&ucli.StringFlag{Name: "jid", Usage: "only the job with this `JID`"},
		&ucli.StringFlag{Name: "error", Usage: "only jobs whose error class or message contains `TEXT` (any case)"},
	}
}

// jobFilter is what filterFlags select; the zero value matches every job.
type jobFilter struct {
	class, jid, errText string
	// queue is the job's queue (retries, scheduled, dead and their bulk
	// actions: queueFilterFlag).
	queue string
}

// queueFilterFlag selects the jobs of a set by their queue.
func queueFilterFlag() ucli.Flag {
	return &ucli.StringFlag{Name: "queue", Aliases: []string{"q"}, Usage: "only jobs of queue `NAME`"}
}

func filterFromFlags(c *ucli.Context) jobFilter {
	return jobFilter{class: c.String("class"), jid: c.String("jid"), errText: strings.ToLower(c.String("error")), queue: c.String("queue")}
}

func (f jobFilter) empty() bool { return f == jobFilter{} }

// String describes the filter for text output: "class=X error=Y".
func (f jobFilter) String() string {
	var parts []string
	for _, p := range [][2]string{{"queue", f.queue}, {"class", f.class}, {"jid", f.jid}, {"error", f.errText}} {
		if p[1] != "" {
			parts = append(parts, p[0]+"="+p[1])
		}
	}
	return strings.Join(parts, " ")
}

// match reports whether r passes the filter. A payload that is not a job
// matches only the empty filter. The raw bytes are checked first, so most
// non-matching jobs are skipped without decoding anything.
func (f jobFilter) match(r *api.JobRecord) bool {
	if f.empty() {
		return true
	}
	// A mailer's "Mailer#method" is not in the payload as such: its
	// parts are.
	mailer, _, _ := strings.Cut(f.class, "#")
	if (f.class != "" && !bytes.Contains(r.Value, []byte(mailer))) ||
		(f.jid != "" && !bytes.Contains(r.Value, []byte(f.jid))) || r.Job == nil {
		return false
	}
	if f.queue != "" && r.Job.Queue() != f.queue {
		return false
	}
	if f.class != "" && !api.MatchesClass(r.Job, f.class) {
		return false
	}
	if f.jid != "" && r.Job.JID() != f.jid {
		return false
	}
	if f.errText != "" {
		text := strings.ToLower(r.Job.ErrorClass() + ": " + r.Job.ErrorMessage())
		if !strings.Contains(text, f.errText) {
			return false
		}
	}
	return true
}

// scanPageSize is how many jobs a filtered listing or bulk action reads at
// once.
const scanPageSize = 500

// filteredPage returns the jobs of a listing that match f, after skipping
// offset matches and at most limit of them, in the listing's order, with
// the number of all matches and the listing's size. page reads the
// listing (api.JobSet.Page, api.Queue.Page).
func filteredPage[T any](ctx context.Context, f jobFilter, offset, limit int,
	page func(ctx context.Context, offset, limit int) ([]T, int64, error), record func(T) *api.JobRecord,
) ([]T, int, int64, error) {
	var out []T
	matching := 0
	var size int64
	for off := 0; ; off += scanPageSize {
		items, n, err := page(ctx, off, scanPageSize)
		if err != nil {
			return nil, 0, 0, err
		}
		if off == 0 {
			size = n
		}
		for _, it := range items {
			if !f.match(record(it)) {
				continue
			}
			if matching >= offset && len(out) < limit {
				out = append(out, it)
			}
			matching++
		}
		if len(items) < scanPageSize {
			return out, matching, size, nil
		}
	}
}

// bulkCounts is what a bulk action did: done entries it acted on, gone
// ones that left the set before it reached them (processed, moved or
// deleted elsewhere), left ones whose payload is not a job and stay.
type bulkCounts struct{ done, gone, left int }

// eachMatch calls act for every entry of set matching f, in the set's
// order, and counts what happened. act removes the entry from the set when
// it succeeds, so the next page starts that many entries earlier (as
// Ruby's JobSet#each shifts its pages). An entry gone meanwhile
// (api.ErrJobNotFound) or whose payload is not a job (api.ErrUnparsableJob)
// is counted and skipped; any other error stops the pass.
func eachMatch(ctx context.Context, set *api.JobSet, f jobFilter, act func(*api.SortedEntry) error, progress func(int)) (bulkCounts, error) {
	var n bulkCounts
	for off := 0; ; {
		entries, _, err := set.Page(ctx, off, scanPageSize)
		if err != nil {
			return n, err
		}
		removed := 0
		for _, en := range entries {
			if !f.match(en.JobRecord) {
				continue
			}
			if err := act(en); err != nil {
				if errors.Is(err, api.ErrJobNotFound) {
					removed++ // gone meanwhile: it left the set all the same
					n.gone++
					continue
				}
				if errors.Is(err, api.ErrUnparsableJob) {
					n.left++
					continue // stays where it is
				}
				return n, fmt.Errorf("%s: %w", en.JID(), err)
			}
			removed++
			n.done++
		}
		if progress != nil && removed > 0 {
			progress(n.done)
		}
		if len(entries) < scanPageSize {
			return n, nil
		}
		off += len(entries) - removed
	}
}
