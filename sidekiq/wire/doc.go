// Package wire is what a Go program needs of the Sidekiq job format to
// push jobs and to write handlers next to Ruby Sidekiq:
//
//   - Job: one payload. It keeps every key, in order, and re-encodes to the
//     bytes Ruby's JSON.generate writes (package rubyjson); a job read from
//     Redis keeps its original bytes. NewJob, ParseJob and JobFromMap make
//     one; Client.Push gives it a jid and its timestamps.
//   - Version: the Sidekiq release whose format is written (timestamps,
//     backtrace encoding, heartbeat layout, retry jitter). Pick the oldest
//     Sidekiq that reads the same Redis.
//   - QueueWeight: a queue to fetch from and its weight.
//
// # Timestamps
//
// Up to 7.x created_at, enqueued_at, failed_at and retried_at are float
// epoch seconds, always written with a fraction ("1795296573.0"); from 8.0
// they are integer milliseconds. Job.Time decides per field by the JSON
// lexical type, so payloads mixing both read correctly; the client and the
// server write the format of their Version. Sorted-set scores stay float
// seconds in every version.
//
// The Redis keys, the operations on them and every fact of the format, with
// the Ruby source file and version it comes from, are in
// docs/sidekiq-wire.md.
package wire
