package ordered

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Handler processes the pending jobs of one ordering key, oldest score
// first (Lowkiq's perform, one key at a time).
//
// Returning nil acknowledges every job of the batch. Returning an error
// fails the batch: it goes back to the key's queue with retry_count + 1
// and perform_in now + RetryIn(retry_count), merged with what was pushed
// meanwhile. A *PartialError acknowledges its first Done jobs and fails
// the rest, so jobs that succeeded do not run again.
type Handler interface {
	Perform(ctx context.Context, b *Batch) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, b *Batch) error

// Perform calls f.
func (f HandlerFunc) Perform(ctx context.Context, b *Batch) error { return f(ctx, b) }

// Batch is the pending jobs of one key, handed to a Handler together.
type Batch struct {
	Queue string
	Key   string
	Shard int
	// RetryCount is Lowkiq's retry_count: -1 for jobs never failed, n for
	// jobs that failed n+1 times.
	RetryCount int
	// Jobs are in score order. Each is its pushed payload plus "queue",
	// "jid" (stable for the key and payload, so the same across retries),
	// "ordered_key", "ordered_score" and, after a failure, "retry_count".
	Jobs   []*wire.Job
	Scores []float64
}

// PartialError fails a batch after its first Done jobs succeeded.
type PartialError struct {
	Done int
	Err  error
}

func (e *PartialError) Error() string {
	return fmt.Sprintf("job %d of the batch failed: %v", e.Done+1, e.Err)
}

func (e *PartialError) Unwrap() error { return e.Err }

// deliveredJob decodes a stored payload and adds what a handler needs.
func deliveredJob(queue, key string, payload []byte, score float64, retryCount int) (*wire.Job, error) {
	job, err := wire.ParseJob(payload)
	if err != nil {
		return nil, err
	}
	if job.Class() == "" {
		return nil, errors.New(`it has no "class"`)
	}
	sum := sha1.Sum(append(append([]byte(key), 0), payload...))
	job.SetQueue(queue)
	job.Set("jid", rubyjson.StringValue(hex.EncodeToString(sum[:12])))
	job.Set("ordered_key", rubyjson.StringValue(key))
	job.Set("ordered_score", scoreValue(score))
	if retryCount >= 0 {
		contract.SetRetryCount(job, retryCount)
	}
	return job, nil
}

func scoreValue(f float64) rubyjson.Value {
	if f == float64(int64(f)) {
		return rubyjson.IntValue(int64(f))
	}
	return rubyjson.FloatValue(f)
}

func formatScore(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
