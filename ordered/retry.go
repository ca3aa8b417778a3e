package ordered

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"time"
)

// defaultMaxRetryCount is Lowkiq's default max_retry_count.
const defaultMaxRetryCount = 25

// defaultRetryIn is Lowkiq's default retry_in: count⁴ + 15 + rand(30) ×
// (count + 1) seconds (15, 16, 31, 96, 271, … plus jitter), from
// lib/lowkiq/worker.rb.
func defaultRetryIn(count int) time.Duration {
	c := int64(count)
	return time.Duration(c*c*c*c+15+rand.Int64N(30)*(c+1)) * time.Second
}

// outcome is what the commit script writes for one key of a batch.
type outcome struct {
	key       string
	done      int    // lowest-score payloads acknowledged
	kind      string // ok, fail or restore
	rc        string // retry_count of what goes back
	performIn string // ms
	bury      bool   // the oldest payload left goes to the morgue
	err       string
	malformed bool // bury is for a payload that is not a job
}

// malformedError reports a payload of a key that is not a job (not a JSON
// object, or without a class): the Done payloads before it succeeded.
type malformedError struct {
	Done int
	Err  error
}

func (e *malformedError) Error() string { return e.Err.Error() }
func (e *malformedError) Unwrap() error { return e.Err }

func (o outcome) args() []any {
	bury := "0"
	if o.bury {
		bury = "1"
	}
	return []any{o.key, o.done, o.kind, o.rc, o.performIn, bury, o.err}
}

// decide applies Lowkiq's rules (lib/lowkiq/shard_handler.rb, fail! and
// separate) to the result of one key's batch: success acknowledges all;
// a failure increments retry_count and sets perform_in to now +
// retryIn(retry_count); at maxRetry the oldest payload left goes to the
// morgue and the rest go back as new (retry_count -1, perform_in now, the
// README's rule). stopped means the process is stopping or lost the
// shard: what is left goes back unchanged (Lowkiq's restore).
func decide(b *taken, n int, err error, stopped bool, now time.Time, maxRetry int, retryIn func(int) time.Duration) outcome {
	o := outcome{key: b.key, rc: strconv.Itoa(b.rc), performIn: b.performIn}
	if err == nil {
		o.done, o.kind = n, "ok"
		return o
	}
	var me *malformedError
	if errors.As(err, &me) {
		// Not a job: no retry could help. It goes to the morgue unchanged
		// now, and the payloads after it go back as new (the key did not
		// fail; the jobs before it succeeded).
		o.done, o.kind, o.bury, o.malformed = min(max(me.Done, 0), n), "fail", true, true
		o.err = me.Error()
		o.rc = "-1"
		o.performIn = strconv.FormatInt(now.UnixMilli(), 10)
		return o
	}
	var pe *PartialError
	if errors.As(err, &pe) {
		o.done = min(max(pe.Done, 0), n)
		err = pe.Err
		if o.done == n {
			o.kind = "ok"
			return o
		}
	}
	if stopped {
		o.kind = "restore"
		return o
	}
	o.kind = "fail"
	o.err = errorMessage(err)
	rc := b.rc + 1
	if rc >= maxRetry {
		o.bury = true
		o.rc = "-1"
		o.performIn = strconv.FormatInt(now.UnixMilli(), 10)
		return o
	}
	o.rc = strconv.Itoa(rc)
	o.performIn = strconv.FormatInt(now.Add(retryIn(rc)).UnixMilli(), 10)
	return o
}

// errorMessage is the error kept with a key: "Class: message" when the
// error names its class.
func errorMessage(err error) string {
	var ec interface{ ErrorClass() string }
	if errors.As(err, &ec) {
		return ec.ErrorClass() + ": " + err.Error()
	}
	return err.Error()
}
