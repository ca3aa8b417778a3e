package contract

// Job control and batch keys (docs/job-control.md, docs/batches.md). They
// are gojob's own: Ruby Sidekiq does not read them.
const (
	// CancelChannel is the pub/sub channel a cancel is published on, the
	// jid as the message: a wake-up only; the cancel itself is the key
	// CancelKey(jid), which survives a subscriber's disconnection.
	CancelChannel = "gojob-cancel"
	// CancelTTL is how long a cancel request is kept, in seconds (a day).
	CancelTTL = 86400
	// StatusTTL is how long a job's status hash is kept after its last
	// write, in seconds (a day).
	StatusTTL = 86400
	// KeyBatches is the sorted set of batch ids, scored by creation time
	// (epoch seconds).
	KeyBatches = "gojob-batches"
	// BatchPayloadKey is the payload key that names a job's batch (a Ruby
	// client that adds a job to a batch sets it;
	// contrib/ruby/gojob_batch.rb).
	BatchPayloadKey = "gojob_bid"
)

// CancelKey is the key whose presence asks for the cancellation of the job
// jid: gojob-cancel:<jid>.
func CancelKey(jid string) string { return "gojob-cancel:" + jid }

// StatusKey is the hash of a job's progress, message, result and outcome:
// gojob-status:<jid>.
func StatusKey(jid string) string { return "gojob-status:" + jid }

// BatchKey is a batch's hash (its description, callbacks, parent and
// counts): gojob-batch:<bid>.
func BatchKey(bid string) string { return "gojob-batch:" + bid }

// BatchJobsKey is the hash of a batch's members, jid (or child batch id)
// to its state: gojob-batch-jobs:<bid>.
func BatchJobsKey(bid string) string { return "gojob-batch-jobs:" + bid }

// Keys of the batches' dead-set watch (docs/batches.md): the score up to
// which the dead set has been read for batch jobs, and the lease that
// lets one process of the cluster read it at a time.
const (
	KeyBatchDeadSeen  = "gojob-batch-dead-seen"
	KeyBatchDeadWatch = "gojob-batch-dead-watch"
)
