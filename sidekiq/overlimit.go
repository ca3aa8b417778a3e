package sidekiq

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/internal/fetch"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// OverLimitError is returned by a handler (through a limiter of package
// limit) when a rate or concurrency limit keeps the job from running now.
// The server reschedules the job instead of failing it, as Sidekiq
// Enterprise does with Sidekiq::Limiter::OverLimit: it is not a failure,
// up to maxOverrated times; after that it is an ordinary failure.
type OverLimitError struct {
	// Limiter names the limiter.
	Limiter string
	// RetryAfter is when the limit lets the job run again (0: unknown; the
	// server backs off as Enterprise does, 300·n + rand(300) + 1 seconds for
	// the n-th time).
	RetryAfter time.Duration
	// NotCounted leaves the reschedule out of the job's "overrated" count,
	// so it never turns into a failure: the limit is only busy and the job
	// waits its turn, however long (gojob work --limit, docs/limiters.md).
	NotCounted bool
}

func (e *OverLimitError) Error() string {
	return fmt.Sprintf("over the limit of %s", e.Limiter)
}

// maxOverrated is how many times a job is rescheduled for a limit before
// the next over-limit counts as a failure (Enterprise: 20).
const maxOverrated = 20

// isOverLimit reports whether err is an *OverLimitError. (A function of
// its own: the target errors.As needs escapes, and a job that succeeded
// should not pay for its allocation.)
func isOverLimit(err error) bool {
	var ol *OverLimitError
	return errors.As(err, &ol)
}

// rescheduleOverLimit puts a job whose handler reported OverLimitError
// back in the schedule set, counting the reschedule in its "overrated"
// field unless the error says not to. It reports false when err is not an over-limit or the job has
// been rescheduled maxOverrated times (then it fails as usual).
func (p *processor) rescheduleOverLimit(u fetch.Unit, job *wire.Job, err error) bool {
	var ol *OverLimitError
	if !errors.As(err, &ol) {
		return false
	}
	n := int64(0)
	if v, ok := job.Get("overrated"); ok {
		n, _ = v.Int()
	}
	if n >= maxOverrated && !ol.NotCounted {
		return false
	}
	if !ol.NotCounted {
		n++
		job.Set("overrated", rubyjson.IntValue(n))
	}
	delay := ol.RetryAfter
	if delay > 0 {
		delay += time.Duration(rand.Int64N(int64(delay/10) + int64(time.Second)))
	} else {
		delay = time.Duration(300*n+rand.Int64N(300)+1) * time.Second
	}
	at := p.cfg.Clock.Now().Add(delay)
	p.fetcher.Finish(u, &fetch.Outcome{Set: contract.KeySchedule, At: at, Payload: job.Bytes()})
	ev := p.log.Info()
	if ol.NotCounted {
		ev = p.log.Debug() // a busy limit's turn: routine, often
	}
	ev.Str("component", "processor").Str("queue", u.Queue).Str("jid", job.JID()).Str("class", job.Class()).
		Str("limiter", ol.Limiter).Int64("overrated", n).Time("run_at", at).Msg("job over its limit; rescheduled (not a failure)")
	return true
}

// isSnooze reports whether err is a Snooze.
func isSnooze(err error) bool {
	var o *outcome
	return errors.As(err, &o) && o.snooze
}

// isInterrupt reports whether err is an Interrupt.
func isInterrupt(err error) bool {
	var o *outcome
	return errors.As(err, &o) && o.interrupt
}

// snooze puts a job whose handler returned Snooze back in the schedule
// set as it was fetched (retry_count untouched). It reports false when err
// is not a Snooze.
func (p *processor) snooze(u fetch.Unit, job *wire.Job, err error) bool {
	var o *outcome
	if !errors.As(err, &o) || !o.snooze {
		return false
	}
	at := p.cfg.Clock.Now().Add(o.retryIn)
	p.fetcher.Finish(u, &fetch.Outcome{Set: contract.KeySchedule, At: at, Payload: u.Raw})
	p.log.Info().Str("component", "processor").Str("queue", u.Queue).Str("jid", job.JID()).Str("class", job.Class()).
		Time("run_at", at).Msg("job snoozed; rescheduled (not a failure)")
	return true
}
