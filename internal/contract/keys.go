package contract

import "github.com/gojob/gojob/sidekiq/wire"

// Sidekiq's Redis key names (docs/sidekiq-wire.md#keys). No prefix is used; Sidekiq keys carry
// no hash tags, so multi-key scripts need a single Redis node. The names
// that package durable reads from package wire are defined there.
const (
	KeyQueues         = "queues"
	KeySchedule       = "schedule"
	KeyRetry          = "retry"
	KeyDead           = "dead"
	KeyProcesses      = "processes"
	KeyStatProcessed  = "stat:processed"
	KeyStatFailed     = "stat:failed"
	KeyProcessCleanup = "process_cleanup"
)

// QueueKey returns the list key of a queue: "queue:<name>".
func QueueKey(name string) string { return "queue:" + name }

// QueueName strips the "queue:" prefix from a list key.
func QueueName(key string) string {
	if len(key) > 6 && key[:6] == "queue:" {
		return key[6:]
	}
	return key
}

// IterationKey is the state hash of Sidekiq's iterable job jid, "it-<jid>"
// (fields ex, c, rt and cancelled; lib/sidekiq/job/iterable.rb, 7.3+).
// Its field IterationCancelled, epoch seconds, cancels the job
// (Sidekiq::Client#cancel!, Sidekiq::Job::Iterable#cancel!).
func IterationKey(jid string) string { return "it-" + jid }

const (
	// IterationCancelled is the field of IterationKey whose presence
	// cancels the job.
	IterationCancelled = "cancelled"
	// IterationTTL is the expiry of IterationKey, in seconds
	// (Sidekiq::Job::Iterable::STATE_TTL, 30 days).
	IterationTTL = 30 * 24 * 60 * 60
)

// DailyStatKey returns "stat:<kind>:<YYYY-MM-DD>" for kind "processed" or
// "failed".
func DailyStatKey(kind, date string) string { return "stat:" + kind + ":" + date }

// WorkKey returns the busy-jobs hash of a process for version v.
func WorkKey(identity string, v wire.Version) string { return identity + ":" + WorkKeySuffix(v) }

// SignalsKey returns the signal list of a process.
func SignalsKey(identity string) string { return identity + "-signals" }

// Dead-set limits (Sidekiq defaults, docs/sidekiq-wire.md#dead-set).
const (
	DeadMaxJobs          = 10000
	DeadTimeoutInSeconds = 180 * 24 * 3600
	// StatTTL is the TTL of the daily stat keys, 5×365 days.
	StatTTL = 157680000
)

// KeyPausedQueues is gojob's set of paused queue names (docs/queue-pause.md):
// gojob processes stop fetching from them within a second; Ruby processes
// only when they load contrib/ruby/gojob.rb.
const KeyPausedQueues = "gojob-paused-queues"

// CronSetKey is sidekiq-cron's set of its jobs' hash keys: cron_jobs in
// the gem's 1.x layout, cron_jobs:<namespace> in 2.x ("default" when
// namespace is empty).
func CronSetKey(v1 bool, namespace string) string {
	if v1 {
		return "cron_jobs"
	}
	if namespace == "" {
		namespace = "default"
	}
	return "cron_jobs:" + namespace
}
