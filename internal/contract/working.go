package contract

import (
	"regexp"
	"strings"
)

// The in-progress lists of reliable fetch, in the layout of the
// gitlab-sidekiq-fetcher gem (sidekiq-reliable-fetch 0.12,
// lib/sidekiq/base_reliable_fetch.rb), so that Ruby processes using that
// gem and gojob processes recover each other's orphaned jobs
// (docs/reliable-fetch.md):
//
//   - "working:queue:<queue>:<identity>": a LIST per process and queue,
//     holding the jobs the process took from "queue:<queue>" and has not
//     finished. identity is "<hostname>:<pid>:<12 lowercase hex>".
//   - "reliable-fetcher-heartbeat-<identity with ':' as '-'>": a string set
//     with a 60 s expiry while the process lives. A list whose owner has no
//     such key is an orphan.
const (
	workingPrefix = "working:"
	// KeyWorkingLists is gojob's registry of in-progress lists (a SET), so
	// that finding orphans needs no keyspace SCAN. Ruby's gem does not
	// know it; its lists are found by SCAN MATCH working:queue:*.
	KeyWorkingLists = "gojob-working-lists"
	// WorkingListPattern is the SCAN pattern of every in-progress list.
	WorkingListPattern = "working:queue:*"
	// KeyRecoveryScanLock limits the keyspace SCAN for in-progress lists to
	// one process at a time.
	KeyRecoveryScanLock = "gojob-working-scan-lock"
	// HeartbeatTTL is the expiry of a reliable-fetch heartbeat, in seconds
	// (the gem's HEARTBEAT_LIFESPAN).
	HeartbeatTTL = 60
)

// WorkingListKey returns the in-progress list of queue for a process.
func WorkingListKey(queue, identity string) string {
	return workingPrefix + QueueKey(queue) + ":" + identity
}

// ReliableHeartbeatKey returns the liveness key of a reliable-fetch process.
func ReliableHeartbeatKey(identity string) string {
	return "reliable-fetcher-heartbeat-" + strings.ReplaceAll(identity, ":", "-")
}

// RecoveryCountKey counts how many times the job with jid was recovered
// from the in-progress list of a dead process (a poison pill dies after a
// few).
func RecoveryCountKey(jid string) string { return "gojob-recoveries:" + jid }

// The gem's parsers: the identity is the last three (or, for the old
// "hostname:pid" form, two) colon-separated parts, so a queue name may hold
// colons.
var (
	workingListRE       = regexp.MustCompile(`\Aworking:(queue:.*):([^:]*:[0-9]*:[0-9a-f]*)\z`)
	legacyWorkingListRE = regexp.MustCompile(`\Aworking:(queue:.*):([^:]*:[0-9]*)\z`)
)

// ParseWorkingListKey returns the queue name and owner identity of an
// in-progress list, or ok=false for a key in neither of the gem's formats.
func ParseWorkingListKey(key string) (queue, identity string, ok bool) {
	m := workingListRE.FindStringSubmatch(key)
	if m == nil {
		m = legacyWorkingListRE.FindStringSubmatch(key)
	}
	if m == nil {
		return "", "", false
	}
	return QueueName(m[1]), m[2], true
}
