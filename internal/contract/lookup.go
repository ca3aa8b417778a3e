package contract

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/gojob/gojob/sidekiq/wire"
	"github.com/gomodule/redigo/redis"
)

// The jid lookups read queues and sorted sets in chunks and stop as soon as
// every wanted jid is found, so no set is too large to search and none is
// loaded into memory whole. A member matches when its payload's top-level
// "jid" is wanted: candidates are found in the text and confirmed by
// parsing, so a "jid" key inside the args never matches.

// lookupChunk is the LRANGE page and the ZSCAN COUNT of the lookups.
const lookupChunk = 1000

// SetMember is a member of a sorted set found by jid.
type SetMember struct {
	// Value is the member's exact bytes.
	Value []byte
	// Score is its score, epoch seconds.
	Score float64
}

// FindInSet returns the first member found for each wanted jid in a sorted
// set (retry, schedule, dead). ZSCAN returns every member present for the
// whole scan. A few jids each get a ZSCAN MATCH *<jid>* (Redis filters, as
// Ruby's JobSet#find_job); more stream the set once.
func FindInSet(ctx context.Context, conn redis.Conn, key string, jids []string) (map[string]SetMember, error) {
	found := map[string]SetMember{}
	scan := func(match string, want map[string]bool) error {
		cursor := "0"
		for {
			args := []any{key, cursor, "COUNT", lookupChunk}
			if match != "" {
				args = append(args, "MATCH", match)
			}
			vals, err := redis.Values(redis.DoContext(conn, ctx, "ZSCAN", args...))
			if err != nil {
				return fmt.Errorf("sidekiq: scan %s: %w", key, err)
			}
			if len(vals) != 2 {
				return fmt.Errorf("sidekiq: scan %s: unexpected reply of %d elements", key, len(vals))
			}
			if cursor, err = redis.String(vals[0], nil); err != nil {
				return fmt.Errorf("sidekiq: scan %s: %w", key, err)
			}
			pairs, err := redis.ByteSlices(vals[1], nil)
			if err != nil {
				return fmt.Errorf("sidekiq: scan %s: %w", key, err)
			}
			for i := 0; i+1 < len(pairs); i += 2 {
				jid, ok := MemberJID(pairs[i], want)
				if !ok {
					continue
				}
				if _, seen := found[jid]; seen {
					continue
				}
				score, err := ParseScore(string(pairs[i+1]))
				if err != nil {
					return fmt.Errorf("sidekiq: scan %s: bad score %q", key, pairs[i+1])
				}
				found[jid] = SetMember{Value: pairs[i], Score: score}
			}
			if cursor == "0" || allFound(found, want) {
				return nil
			}
		}
	}
	if len(jids) <= 8 {
		for _, jid := range jids {
			if err := scan("*"+globEscape(jid)+"*", map[string]bool{jid: true}); err != nil {
				return nil, err
			}
		}
		return found, nil
	}
	want := make(map[string]bool, len(jids))
	for _, jid := range jids {
		want[jid] = true
	}
	if err := scan("", want); err != nil {
		return nil, err
	}
	return found, nil
}

func allFound(found map[string]SetMember, want map[string]bool) bool {
	for jid := range want {
		if _, ok := found[jid]; !ok {
			return false
		}
	}
	return true
}

// FindInQueue returns the stored bytes of the first job found for each
// wanted jid in queue:<name>.
//
// Jobs looked up by jid are usually the oldest, at the right (BRPOP) end,
// so the list is first read from the right in chunks. Reading by negative
// index can skip an element while fetchers pop, so when a jid is still not
// found and the list was longer than one chunk, it is read again from the
// left, where pops and pushes never make an element skip a chunk.
func FindInQueue(ctx context.Context, conn redis.Conn, queue string, jids []string) (map[string][]byte, error) {
	found := map[string][]byte{}
	if len(jids) == 0 {
		return found, nil
	}
	want := make(map[string]bool, len(jids))
	for _, jid := range jids {
		want[jid] = true
	}
	key := QueueKey(queue)
	check := func(vals [][]byte) {
		for _, v := range vals {
			if jid, ok := MemberJID(v, want); ok {
				if _, seen := found[jid]; !seen {
					found[jid] = v
				}
			}
		}
	}
	n, err := redis.Int64(redis.DoContext(conn, ctx, "LLEN", key))
	if err != nil {
		return nil, fmt.Errorf("sidekiq: length of queue %s: %w", queue, err)
	}
	if n <= lookupChunk {
		vals, err := redis.ByteSlices(redis.DoContext(conn, ctx, "LRANGE", key, 0, -1))
		if err != nil {
			return nil, fmt.Errorf("sidekiq: read queue %s: %w", queue, err)
		}
		check(vals)
		return found, nil
	}
	for end := int64(-1); len(found) < len(want); end -= lookupChunk {
		vals, err := redis.ByteSlices(redis.DoContext(conn, ctx, "LRANGE", key, end-lookupChunk+1, end))
		if err != nil {
			return nil, fmt.Errorf("sidekiq: read queue %s: %w", queue, err)
		}
		if len(vals) == 0 {
			break
		}
		check(vals)
	}
	for start := int64(0); len(found) < len(want); start += lookupChunk {
		vals, err := redis.ByteSlices(redis.DoContext(conn, ctx, "LRANGE", key, start, start+lookupChunk-1))
		if err != nil {
			return nil, fmt.Errorf("sidekiq: read queue %s: %w", queue, err)
		}
		if len(vals) == 0 {
			break
		}
		check(vals)
	}
	return found, nil
}

var jidKey = []byte(`"jid"`)

// MemberJID returns the top-level jid of a stored payload if it is one of
// wanted. Candidates are found textually (a "jid" key inside the args is
// possible, so every occurrence is tried) and confirmed by parsing. Integer
// jids (SideJob's) match by their decimal text.
func MemberJID(member []byte, wanted map[string]bool) (string, bool) {
	rest := member
	for {
		i := bytes.Index(rest, jidKey)
		if i < 0 {
			return "", false
		}
		rest = rest[i+len(jidKey):]
		cand := bytes.TrimLeft(rest, " \t\r\n")
		if len(cand) == 0 || cand[0] != ':' {
			continue
		}
		cand = bytes.TrimLeft(cand[1:], " \t\r\n")
		end := -1
		if len(cand) > 0 && cand[0] == '"' {
			cand = cand[1:]
			end = bytes.IndexByte(cand, '"')
		} else {
			end = bytes.IndexAny(cand, ", \t\r\n}")
		}
		if end < 0 {
			continue
		}
		jid := string(cand[:end])
		if wanted[jid] {
			if j, err := wire.ParseJob(member); err == nil && j.JID() == jid {
				return jid, true
			}
		}
	}
}

// globEscape escapes Redis glob metacharacters.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		switch c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// FindInWorkingLists returns, for each wanted jid found in a reliable-fetch
// in-progress list (working:queue:<q>:<identity>, of a live process or of
// a dead one whose jobs are about to be recovered), the list that holds it.
// The lists are gojob's registry (KeyWorkingLists) and, for jids still not
// found, those a SCAN finds (Ruby processes using the
// gitlab-sidekiq-fetcher gem do not register theirs).
func FindInWorkingLists(ctx context.Context, conn redis.Conn, jids []string) (map[string]string, error) {
	found := map[string]string{}
	if len(jids) == 0 {
		return found, nil
	}
	want := make(map[string]bool, len(jids))
	for _, jid := range jids {
		want[jid] = true
	}
	seen := map[string]bool{}
	search := func(lists []string) error {
		for _, list := range lists {
			if seen[list] || len(found) == len(want) {
				continue
			}
			seen[list] = true
			vals, err := redis.ByteSlices(redis.DoContext(conn, ctx, "LRANGE", list, 0, -1))
			if err != nil {
				return fmt.Errorf("sidekiq: read %s: %w", list, err)
			}
			for _, v := range vals {
				if jid, ok := MemberJID(v, want); ok {
					found[jid] = list
				}
			}
		}
		return nil
	}
	registered, err := redis.Strings(redis.DoContext(conn, ctx, "SMEMBERS", KeyWorkingLists))
	if err != nil {
		return nil, fmt.Errorf("sidekiq: read %s: %w", KeyWorkingLists, err)
	}
	if err := search(registered); err != nil {
		return nil, err
	}
	cursor := "0"
	for len(found) < len(want) {
		vals, err := redis.Values(redis.DoContext(conn, ctx, "SCAN", cursor, "MATCH", WorkingListPattern, "COUNT", lookupChunk))
		if err != nil {
			return nil, fmt.Errorf("sidekiq: scan for in-progress lists: %w", err)
		}
		if len(vals) != 2 {
			return nil, fmt.Errorf("sidekiq: scan for in-progress lists: unexpected reply")
		}
		cursor, _ = redis.String(vals[0], nil)
		keys, _ := redis.Strings(vals[1], nil)
		if err := search(keys); err != nil {
			return nil, err
		}
		if cursor == "0" {
			break
		}
	}
	return found, nil
}
