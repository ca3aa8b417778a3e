// Package sidekiq speaks Ruby Sidekiq's Redis protocol: it pushes, fetches,
// runs, retries and buries jobs exactly as Sidekiq 6.4, 7.x and 8.x do, so a
// gojob process shares one Redis with Ruby processes, Ruby clients and the
// Sidekiq Web UI without anything in Redis telling them apart.
//
// The main types:
//
//   - Job: one payload. It keeps every key, in order, and re-encodes to the
//     bytes Ruby's JSON.generate writes (package rubyjson).
//   - Client: Push, PushBulk, scheduled pushes, client middleware.
//   - Server: fetch (BasicFetch's BRPOP, one per job, with the BRPOPs of
//     idle slots pipelined on shared connections; or opt-in batched
//     BLMPOP), execution with server
//     middleware, the retry algorithm of the target version, the dead set,
//     the scheduled/retry poller, heartbeat, signals, graceful shutdown.
//   - API: Sidekiq::API — stats, queues, the retry/schedule/dead sets,
//     processes and the work set.
//
// # Wire format
//
// Keys (no prefix): "queues" (SET of queue names), "queue:<name>" (LIST;
// LPUSH to add, BRPOP from the right to fetch, so the oldest job is at -1),
// "schedule", "retry", "dead" (ZSETs scored by float epoch seconds),
// "processes" (SET of identities "host:pid:nonce"), "<identity>" (HASH with
// info, busy, beat, quiet, rss, rtt_us, concurrency; TTL 60 s),
// "<identity>:workers" (≤ 6.4.1) or "<identity>:work" (HASH tid → work JSON),
// "<identity>-signals" (LIST of TSTP/TERM/TTIN), "stat:processed",
// "stat:failed" and their daily "stat:<kind>:YYYY-MM-DD" keys (TTL 5 years),
// and the "process_cleanup" lock.
//
// Payload fields: class, args, jid (24 lowercase hex), queue, retry (bool or
// count; 0 means straight to the dead set, false means no dead set), and the
// optional retry_for, retry_queue, backtrace, dead, tags, wrapped, bid. The
// client adds created_at and enqueued_at; failures add error_message,
// error_class, failed_at, retry_count (-1 after a manual retry is legal),
// error_backtrace (JSON array → zlib → base64, MIME-wrapped up to 7.2.0,
// strict from 7.2.1) and later retried_at.
//
// Timestamps: up to 7.x created_at, enqueued_at, failed_at and retried_at
// are float epoch seconds, always written with a fraction ("1795296573.0");
// from 8.0 they are integer milliseconds. Readers decide per field by the
// JSON lexical type (ReadTimestamp), so payloads mixing both read correctly.
// Sorted-set scores, "beat", "started_at" and "at" stay float seconds in
// every version. Pick the format with Version: the oldest Sidekiq that reads
// the same Redis (DetectVersion reads it from the live processes).
//
// Lua: the poller's pop-by-score script (lua/zpopbyscore_*.lua) touches one
// key; Sidekiq keys carry no hash tags, so use a single Redis node.
package sidekiq
