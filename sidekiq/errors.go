package sidekiq

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// errorClasser is implemented by errors that name their Ruby-style class
// with an ErrorClass() string method: it becomes the job's error_class
// (shown by the Web UI).
type errorClasser interface {
	ErrorClass() string
}

// stackTracer is implemented by errors that carry a stack trace with a
// StackTrace() []string method: its lines become error_backtrace when the
// job asks for backtraces.
type stackTracer interface {
	StackTrace() []string
}

type classedError struct {
	class string
	err   error
}

func (e *classedError) Error() string      { return e.err.Error() }
func (e *classedError) Unwrap() error      { return e.err }
func (e *classedError) ErrorClass() string { return e.class }

// WithErrorClass gives err a Ruby-style class name for error_class, for
// example "ArgumentError".
func WithErrorClass(class string, err error) error { return &classedError{class: class, err: err} }

// nameError is the failure of a job whose class has no handler, as Ruby's
// constantize raises it.
type nameError struct{ Class string }

func (e *nameError) Error() string      { return "uninitialized constant " + e.Class }
func (e *nameError) ErrorClass() string { return "NameError" }

// PanicError is a recovered panic in a handler or middleware.
type PanicError struct {
	Value any
	Stack []string
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// ErrorClass returns "Panic", or the class of a panicked error value.
func (e *PanicError) ErrorClass() string {
	if err, ok := e.Value.(error); ok {
		return ErrorClassOf(err)
	}
	return "Panic"
}

// StackTrace returns the goroutine stack at the panic.
func (e *PanicError) StackTrace() []string { return e.Stack }

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// outcome wraps a handler error with a retry decision.
type outcome struct {
	err      error
	discard  bool
	kill     bool
	retryIn  time.Duration
	hasDelay bool
	// snooze reschedules the job after retryIn without a failure.
	snooze bool
	// interrupt gives the job back to its queue (Interrupt).
	interrupt bool
}

func (o *outcome) Error() string {
	if o.err == nil {
		return "job failed"
	}
	return o.err.Error()
}
func (o *outcome) Unwrap() error { return o.err }

// Discard fails the job without a retry and without the dead set (death
// handlers are not called either). The failure is counted. The error has
// a Discarded() bool method reporting true, for extensions that account
// for a job's last run (package batch).
func Discard(err error) error { return &outcome{err: err, discard: true} }

// Discarded reports whether the outcome is a Discard.
func (o *outcome) Discarded() bool { return o.discard }

// Kill sends the failed job straight to the dead set, skipping its retries.
func Kill(err error) error { return &outcome{err: err, kill: true} }

// RetryIn fails the job and schedules its retry after d instead of the
// default backoff (jitter is still added, as Sidekiq adds it to custom
// delays).
func RetryIn(d time.Duration, err error) error {
	return &outcome{err: err, retryIn: d, hasDelay: true}
}

// Snooze ends the job without a failure and runs it again after d: the
// job goes to the schedule set unchanged (its retry_count untouched), it
// is counted as processed and not as failed, and no retry or death
// follows. A handler returns it as its error (docs/job-control.md).
func Snooze(d time.Duration) error {
	return &outcome{err: fmt.Errorf("snoozed for %s", d), retryIn: max(d, 0), snooze: true}
}

// Interrupt is the outcome of a job that stopped at a safe point to go on
// later, its progress saved (an iterable job at a quiet, or after its
// run time): the job goes back to the front of its queue with its
// original bytes, neither retried nor dead, as a job unfinished at
// shutdown does. Sidekiq's InterruptHandler pushes such a job again; as
// there, the run counts as processed and failed, and the job metrics count
// it without a failure.
func Interrupt() error { return &outcome{err: errInterrupted, interrupt: true} }

var errInterrupted = errors.New("interrupted; back to its queue to resume")

// ErrorClassOf returns the error_class gojob writes for err: the class an
// error with an ErrorClass() string method names; "RuntimeError" (Ruby's class for a plain raise) for
// errors.New and fmt.Errorf errors; otherwise the Go type name without the
// pointer star, such as "myapp.PaymentError".
func ErrorClassOf(err error) string {
	for {
		o, ok := err.(*outcome)
		if !ok {
			break
		}
		err = o.err
	}
	if err == nil {
		return "RuntimeError"
	}
	var c errorClasser
	if errors.As(err, &c) {
		return c.ErrorClass()
	}
	t := reflect.TypeOf(err)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	name := t.String()
	switch name {
	case "errors.errorString", "fmt.wrapError", "fmt.wrapErrors", "errors.joinError":
		return "RuntimeError"
	case "context.deadlineExceededError":
		return "Timeout::Error"
	}
	if strings.HasPrefix(name, "struct") || name == "" {
		return "RuntimeError"
	}
	return name
}
