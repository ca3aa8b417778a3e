// Package wire is the Sidekiq Redis contract: everything Ruby Sidekiq
// would write byte for byte lives here and nowhere else in gojob.
//
//   - Job: one payload. It keeps every key, in order, and re-encodes to the
//     bytes Ruby's JSON.generate writes (package rubyjson); a job read from
//     Redis keeps its original bytes.
//   - Version: the Sidekiq release whose format is written (timestamps,
//     backtrace encoding, heartbeat layout, retry jitter), and
//     DetectVersion, which reads it from the live processes.
//   - Keys, timestamps and scores, the error_backtrace codec, queue
//     weights, the poller's Lua script (byte-identical to Ruby's, so both
//     share one SHA).
//   - The Redis operations that several layers share and that must match
//     Ruby exactly: SendToMorgue (the dead set with its trims),
//     CleanupProcesses, and the jid lookups FindInQueue and FindInSet.
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
// they are integer milliseconds. Readers decide per field by the JSON
// lexical type (ReadTimestamp), so payloads mixing both read correctly.
// Sorted-set scores, "beat", "started_at" and "at" stay float seconds in
// every version. Pick the format with Version: the oldest Sidekiq that
// reads the same Redis.
//
// Every fact, with the Ruby source file and version it comes from, is in
// docs/sidekiq-wire.md.
package wire
