// Package contract is the part of the Sidekiq Redis contract that gojob's
// own packages share and its users do not need: key names and builders,
// timestamps and scores, the error_backtrace encoder, the job-metrics keys,
// the job fields only gojob itself reads (Retry, Tags, Wrapped), the format
// a process writes (Format, LiveFormat) and the version decision, and the
// Redis operations that must match Ruby
// exactly: SendToMorgue (the dead set with its trims), CleanupProcesses,
// and the jid lookups FindInQueue, FindInSet and FindInWorkingLists. The
// payload itself (wire.Job), the versions and the queue weights are in
// package wire.
//
// # Keys
//
// No prefix is used: "queues" (SET of queue names), "queue:<name>" (LIST;
// LPUSH to add, BRPOP from the right to fetch, so the oldest job is at -1),
// "schedule", "retry", "dead" (ZSETs scored by float epoch seconds),
// "processes" (SET of identities "host:pid:nonce"), "<identity>" (HASH
// with info, busy, beat, quiet, rss, rtt_us, concurrency; TTL 60 s),
// "<identity>:workers" (≤ 6.4.1) or "<identity>:work" (HASH tid → work
// JSON), "<identity>-signals" (LIST of TSTP/TERM/TTIN), "stat:processed",
// "stat:failed" and their daily "stat:<kind>:YYYY-MM-DD" keys, and the
// "process_cleanup" lock. Sidekiq keys carry no hash tags, so scripts and
// transactions over several keys need a single Redis node.
//
// # Timestamps
//
// Up to 7.x created_at, enqueued_at, failed_at and retried_at are float
// epoch seconds, always written with a fraction ("1795296573.0"); from 8.0
// they are integer milliseconds (wire.Job.Time reads both). Sorted-set
// scores, "beat", "started_at" and "at" stay float seconds in every
// version.
//
// Every fact, with the Ruby source file and version it comes from, is in
// docs/sidekiq-wire.md.
package contract
