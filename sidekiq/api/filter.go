package api

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"regexp"
	"slices"
	"strings"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Filter selects the jobs of a set or a queue, for JobSet.Page,
// Queue.Page and JobSet.Bulk. Every field that is set must match; the
// zero Filter (or a nil *Filter) matches every entry.
//
// Text is the Web UI's search: it matches the stored bytes, so it finds
// entries whose payload is not a JSON object too. The other fields read
// the parsed job, so an entry whose payload is not a job matches none of
// them. The fields are the CLI's filter flags (--queue, --class, --jid,
// --error, --search) and the dashboard's search box (Text).
type Filter struct {
	// Queue is the job's queue, the whole name.
	Queue string
	// Class is the job's class, an ActiveJob's wrapped class, or a mailer
	// job's mailer ("UserMailer") or "UserMailer#welcome", as the Web UI
	// lists it (DisplayClass).
	Class string
	// JID is the job's jid, the whole of it.
	JID string
	// Error is a part of "error_class: error_message", in any case.
	Error string
	// Text is a part of the stored JSON, case-sensitive, as Ruby's search
	// box (ZSCAN MATCH *text*, with *?[]\ literal): a jid, a class, an
	// argument, an error message. A mailer job's listed name
	// "UserMailer#welcome" finds the payload's "UserMailer","welcome"
	// (ActiveJob's arguments) instead.
	Text string
}

// matcher is a Filter ready to test entries.
type matcher struct {
	f Filter
	// text is what Text must find in the stored bytes; class what Class
	// must (the mailer without its method: the payload has the parts).
	text, class []byte
	errText     string
	// parse is whether a field other than Text is set.
	parse bool
}

func newMatcher(f *Filter) *matcher {
	m := &matcher{}
	if f == nil {
		return m
	}
	m.f = *f
	m.text = []byte(searchNeedle(f.Text))
	mailer, _, _ := strings.Cut(f.Class, "#")
	m.class = []byte(mailer)
	m.errText = strings.ToLower(f.Error)
	m.parse = f.Queue != "" || f.Class != "" || f.JID != "" || f.Error != ""
	return m
}

func (m *matcher) all() bool { return m.f == Filter{} }

// raw reports whether the stored bytes may match: false rules the entry
// out without parsing it.
func (m *matcher) raw(v []byte) bool {
	return bytes.Contains(v, m.text) && bytes.Contains(v, m.class) && bytes.Contains(v, []byte(m.f.JID))
}

// match reports whether r passes the filter.
func (m *matcher) match(r *JobRecord) bool {
	if m.all() {
		return true
	}
	if !m.raw(r.Value) {
		return false
	}
	return !m.parse || (r.Job != nil && m.job(r.Job))
}

// matchValue is match for stored bytes not parsed yet: only those that
// may match are.
func (m *matcher) matchValue(v []byte) bool {
	if m.all() {
		return true
	}
	if !m.raw(v) {
		return false
	}
	if !m.parse {
		return true
	}
	j, err := wire.ParseJob(v)
	return err == nil && m.job(j)
}

// job checks the fields that read the parsed job.
func (m *matcher) job(j *wire.Job) bool {
	if m.f.Queue != "" && j.Queue() != m.f.Queue {
		return false
	}
	if m.f.JID != "" && j.JID() != m.f.JID {
		return false
	}
	if m.f.Class != "" && !matchesClass(j, m.f.Class) {
		return false
	}
	return m.errText == "" || strings.Contains(strings.ToLower(j.ErrorClass()+": "+j.ErrorMessage()), m.errText)
}

// pattern is the ZSCAN MATCH pattern that lets through every entry the
// filter may match: its most selective raw part.
func (m *matcher) pattern() string {
	for _, s := range [][]byte{m.text, []byte(m.f.JID), m.class} {
		if len(s) > 0 {
			return "*" + escapeGlob(string(s)) + "*"
		}
	}
	return "*"
}

// mailerName is a mailer job's name as DisplayClass shows it,
// "UserMailer#welcome".
var mailerName = regexp.MustCompile(`\A([A-Za-z_][A-Za-z0-9_:]*)#([A-Za-z_][A-Za-z0-9_]*[?!]?)\z`)

// searchNeedle is what a search for q finds in the stored bytes: q, or for
// a mailer job's shown name "Mailer#method" the two strings as its payload
// holds them, "Mailer","method".
func searchNeedle(q string) string {
	if m := mailerName.FindStringSubmatch(q); m != nil {
		return `"` + m[1] + `","` + m[2] + `"`
	}
	return q
}

// escapeGlob escapes ZSCAN MATCH's special characters, so a pattern is a
// plain substring.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// searchBatch is the COUNT of each ZSCAN of a search, and how many jobs a
// queue's search reads at once.
const searchBatch = 1000

// rawMember is a sorted-set member as ZSCAN returns it.
type rawMember struct {
	score float64
	value []byte
}

// Page reads limit entries (0 means 25, the Web UI's page size) after the
// first offset that f selects (nil: every entry), in the order the Web UI
// lists the set, and returns them with the set's size when f selects every
// entry, else with the number of all matches.
//
// Without a filter the page is read by index (page). The retry and
// schedule sets are read lowest score first, the next due first (MULTI
// ZCARD; ZRANGE <set> offset offset+limit-1 WITHSCORES; EXEC: the page
// helper of Sidekiq 6.4.1 lib/sidekiq/paginator.rb, as web/application.rb
// calls it for /retries and /scheduled). The dead set is read newest death
// first, in Ruby's JobSet#each order (ties: the greater member first), with
// a negative-index range: ZRANGE <set> -(offset+limit) -(offset+1)
// WITHSCORES, the page reversed.
//
// With a filter, Redis filters (ZSCAN MATCH on the filter's most selective part,
// COUNT 1000), so the whole set is read once but only candidates reach
// this process; it keeps the offset+limit first matches seen so far,
// unparsed unless a field other than Text needs the job, and an 8-byte
// hash per match to count each once (ZSCAN may return a member twice while
// the set changes), never the whole set. The page's entries are then read
// again by score: one processed meanwhile is left out.
func (s *JobSet) Page(ctx context.Context, f *Filter, offset, limit int) ([]*SortedEntry, int64, error) {
	m := newMatcher(f)
	if m.all() {
		return s.page(ctx, offset, limit)
	}
	offset, limit, err := pageBounds(offset, limit)
	if err != nil {
		return nil, 0, err
	}
	best, total, err := s.search(ctx, m, offset+limit)
	if err != nil || offset >= len(best) {
		return nil, total, err
	}
	var out []*SortedEntry
	for _, m := range best[offset:] {
		entries, err := s.Fetch(ctx, m.score, "")
		if err != nil {
			return nil, 0, err
		}
		for _, e := range entries {
			if bytes.Equal(e.Value, m.value) {
				out = append(out, e)
				break
			}
		}
	}
	return out, total, nil
}

// search scans the set for m's matches and returns the first keep of
// them in Page's order with the number of all.
func (s *JobSet) search(ctx context.Context, m *matcher, keep int) ([]rawMember, int64, error) {
	asc := s.name != contract.KeyDead
	less := func(a, b rawMember) int {
		c := cmpFloat(a.score, b.score)
		if c == 0 {
			c = bytes.Compare(a.value, b.value)
		}
		if !asc {
			c = -c
		}
		return c
	}
	var best []rawMember
	seen := map[uint64]struct{}{}
	prune := func() {
		slices.SortFunc(best, less)
		if len(best) > keep {
			clear(best[keep:])
			best = best[:keep]
		}
	}
	pattern := m.pattern()
	hs := fnv.New64a()
	for cursor := "0"; ; {
		conn, err := s.api.conn(ctx, "search "+s.name)
		if err != nil {
			return nil, 0, err
		}
		vals, err := redis.Values(redis.DoContext(conn, ctx, "ZSCAN", s.name, cursor, "MATCH", pattern, "COUNT", searchBatch))
		conn.Close()
		if err == nil && len(vals) != 2 {
			err = fmt.Errorf("unexpected ZSCAN reply of %d elements", len(vals))
		}
		if err == nil {
			cursor, err = redis.String(vals[0], nil)
		}
		var pairs [][]byte
		if err == nil {
			pairs, err = redis.ByteSlices(vals[1], nil)
		}
		if err == nil && len(pairs)%2 != 0 {
			err = fmt.Errorf("odd ZSCAN reply of %d elements", len(pairs))
		}
		if err != nil {
			return nil, 0, fmt.Errorf("sidekiq: search %s: %w", s.name, err)
		}
		for i := 0; i < len(pairs); i += 2 {
			if !m.matchValue(pairs[i]) {
				continue
			}
			score, err := contract.ParseScore(string(pairs[i+1]))
			if err != nil {
				return nil, 0, fmt.Errorf("sidekiq: search %s: bad score %q: %w", s.name, pairs[i+1], err)
			}
			hs.Reset()
			hs.Write(pairs[i+1])
			hs.Write(pairs[i])
			id := hs.Sum64()
			if _, dup := seen[id]; dup {
				continue
			}
			seen[id] = struct{}{}
			if keep > 0 {
				best = append(best, rawMember{score: score, value: pairs[i]})
			}
		}
		if len(best) >= 2*keep+searchBatch {
			prune()
		}
		if cursor == "0" {
			break
		}
	}
	prune()
	return best, int64(len(seen)), nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Page reads limit jobs (0 means 25, the Web UI's page size) after the
// newest offset that f selects (nil: every job), newest first, as the Web
// UI's queue page does, and returns them with the queue's length when f
// selects every job, else with the number of all matches. Without a
// filter it reads the page alone (MULTI LLEN + LRANGE); with one, the
// queue is read in order, 1,000 jobs at a time (LRANGE), and only the
// bytes that may match are parsed.
func (q *Queue) Page(ctx context.Context, f *Filter, offset, limit int) ([]*JobRecord, int64, error) {
	m := newMatcher(f)
	if m.all() {
		return q.page(ctx, offset, limit)
	}
	offset, limit, err := pageBounds(offset, limit)
	if err != nil {
		return nil, 0, err
	}
	var out []*JobRecord
	var matches int64
	for off := int64(0); ; off += searchBatch {
		vals, err := q.lrange(ctx, off, off+searchBatch-1)
		if err != nil {
			return nil, 0, err
		}
		for _, v := range vals {
			if !m.matchValue(v) {
				continue
			}
			if matches >= int64(offset) && len(out) < limit {
				out = append(out, newJobRecord(v, q.name))
			}
			matches++
		}
		if len(vals) < searchBatch {
			return out, matches, nil
		}
	}
}
