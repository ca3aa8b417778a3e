package sidekiq

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/internal/fetch"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// maxErrorMessage is Sidekiq's truncation of error_message (characters).
const maxErrorMessage = 10_000

// retryPlan is what the retry algorithm decided for one failure.
type retryPlan struct {
	// payload is the job to write (retry or dead set), nil when dropped.
	payload []byte
	job     *wire.Job
	// retryAt is the retry score; zero means not retried.
	retryAt time.Time
	// toDead is true when the job goes to the dead set.
	toDead bool
	// died is true when the death handlers run.
	died bool
	// retryCount and maxRetries are the job's retry_count after this
	// failure and its limit, for the log line.
	retryCount, maxRetries int
	// why says, for the log line, why a job was not retried: "retry:
	// false", "retries exhausted", …
	why string
}

// planRetry applies Sidekiq's retry algorithm (docs/sidekiq-wire.md#retries) for the target
// version to a failure of the job whose original bytes are raw, fetched from
// queue. reg is nil for an unknown class. It does not touch Redis.
func (p *processor) planRetry(queue string, raw []byte, reg *registration, failure error, now time.Time, rnd func(n int) int) retryPlan {
	v := p.format.Version()
	var out *outcome
	errors.As(failure, &out)
	if out != nil && out.discard {
		return retryPlan{why: "the handler returned Discard"}
	}
	// The retry payload is built from the original bytes, not from what
	// middleware may have changed (JobRetry#global/local).
	msg, err := wire.ParseJob(raw)
	if err != nil {
		return retryPlan{payload: raw, toDead: true, why: "unparsable payload"}
	}
	rs := contract.Retry(msg)
	if rv, ok := msg.Get("retry"); reg != nil && (!ok || rv.Kind() == rubyjson.Null) {
		// JobRetry#local: a missing retry takes the class option (default true).
		def := rubyjson.BoolValue(true)
		switch r := reg.opts.Retry.(type) {
		case bool:
			def = rubyjson.BoolValue(r)
		case int:
			def = rubyjson.IntValue(int64(r))
		}
		msg.Set("retry", def)
		rs = contract.Retry(msg)
	}
	if !rs.Enabled {
		// retry: false, or absent on an unknown class: death handlers only.
		return retryPlan{job: msg, died: true, why: "retry: false"}
	}
	max := contract.RetryMax(rs, p.cfg.MaxRetries)
	if rq := contract.RetryQueue(msg); rq != "" {
		msg.SetQueue(rq)
	} else {
		msg.SetQueue(queue)
	}
	msg.Set("error_message", rubyjson.StringValue(errorMessage(failure)))
	msg.Set("error_class", rubyjson.StringValue(ErrorClassOf(failure)))
	count := 0
	if c, ok := msg.RetryCount(); ok {
		count = c + 1
		msg.Set("retried_at", contract.TimestampValue(now, v))
	} else {
		msg.Set("failed_at", contract.TimestampValue(now, v))
	}
	contract.SetRetryCount(msg, count)
	if bt, ok := msg.Get("backtrace"); ok && bt.Truthy() {
		contract.SetErrorBacktrace(msg, backtraceLines(bt, backtraceOf(failure)), v)
	}

	exhausted := count >= max
	if rf, ok := contract.RetryFor(msg); ok && v.AtLeast(7, 1, 3) {
		expired := false
		if fa, ok := failedAtFor(msg, v); ok {
			expired = fa.Add(rf).Before(now)
		}
		if v.AtLeast(8, 1, 0) {
			exhausted = expired
		} else {
			exhausted = exhausted || expired
		}
	}
	kill := out != nil && out.kill
	if !exhausted && !kill {
		var delay time.Duration
		custom := false
		if out != nil && out.hasDelay && out.retryIn > 0 {
			delay, custom = out.retryIn, true
		} else if reg != nil && reg.opts.RetryIn != nil {
			d, decision := p.callRetryIn(reg, count, failure, msg)
			switch {
			case decision.discard:
				// 8.0.7+ runs the death handlers; 8.0.8+ marks the job.
				if v.AtLeast(8, 0, 8) {
					msg.Set("discarded_at", rubyjson.IntValue(now.UnixMilli()))
				}
				return retryPlan{job: msg, died: v.AtLeast(8, 0, 7), why: "the RetryIn hook discarded it"}
			case decision.kill:
				kill = true
			default:
				if d > 0 {
					delay, custom = d, true
				}
			}
		}
		if !kill {
			if !custom {
				delay = time.Duration(math.Pow(float64(count), 4)+15) * time.Second
			}
			delay += time.Duration(jitter(v, count, rnd)) * time.Second
			return retryPlan{payload: msg.Bytes(), job: msg, retryAt: now.Add(delay), retryCount: count, maxRetries: max}
		}
	}
	// Exhausted (or killed): the retries_exhausted hook, the dead set unless
	// dead: false or the hook discards, then the death handlers.
	toDead := contract.Dead(msg)
	why := fmt.Sprintf("retries exhausted: %d/%d", count, max)
	switch {
	case out != nil && out.kill:
		why = "the handler returned Kill"
	case kill:
		why = "the RetryIn hook killed it"
	}
	if !toDead {
		why += ", dead: false"
	}
	if reg != nil && reg.opts.RetriesExhausted != nil {
		if p.callRetriesExhausted(reg, msg, failure) {
			toDead = false
			why += ", the RetriesExhausted hook discarded it"
		}
	}
	if !toDead && v.AtLeast(8, 0, 8) {
		msg.Set("discarded_at", rubyjson.IntValue(now.UnixMilli()))
	}
	return retryPlan{payload: msg.Bytes(), job: msg, toDead: toDead, died: true, why: why}
}

// callRetryIn calls the class's RetryIn hook and returns the delay and
// the decision (kill, discard) of the outcome it returned. A panic in it
// is logged and means the default delay, as Ruby rescues an error in
// sidekiq_retry_in ("falling back to default").
func (p *processor) callRetryIn(reg *registration, count int, failure error, msg *wire.Job) (d time.Duration, dec outcome) {
	defer func() {
		if r := recover(); r != nil {
			p.log.Error().Interface("panic", r).Str("jid", msg.JID()).Str("component", "retry").
				Msg("retry_in hook panicked; falling back to the default delay")
			d, dec = 0, outcome{}
		}
	}()
	var o *outcome
	if !errors.As(reg.opts.RetryIn(count, failure, msg), &o) {
		return 0, outcome{}
	}
	dec = outcome{discard: o.discard, kill: o.kill}
	if o.hasDelay {
		d = o.retryIn
	}
	return d, dec
}

// callRetriesExhausted calls the class's RetriesExhausted hook and reports
// whether it discarded the job. A panic in it is logged and ignored (the
// job still goes to the dead set), as Ruby rescues an error in
// sidekiq_retries_exhausted.
func (p *processor) callRetriesExhausted(reg *registration, msg *wire.Job, failure error) (discard bool) {
	defer func() {
		if r := recover(); r != nil {
			p.log.Error().Interface("panic", r).Str("jid", msg.JID()).Str("component", "retry").
				Msg("retries_exhausted hook panicked")
			discard = false
		}
	}()
	var o *outcome
	return errors.As(reg.opts.RetriesExhausted(p.hardCtx, msg, failure), &o) && o.discard
}

// jitter is Sidekiq's retry jitter: rand(10)*(count+1) up to 7.x,
// rand(10*(count+1)) from 8.0.
func jitter(v wire.Version, count int, rnd func(n int) int) int {
	if count < 0 {
		count = 0
	}
	if v.AtLeast(8, 0, 0) {
		return rnd(10 * (count + 1))
	}
	return rnd(10) * (count + 1)
}

// handleFailure plans the retry, writes it through the fetch (which
// releases the unit in the same step), logs where the job went, and runs
// the death handlers.
func (p *processor) handleFailure(u fetch.Unit, job *wire.Job, reg *registration, failure error) {
	now := p.cfg.Clock.Now()
	plan := p.planRetry(u.Queue, u.Raw, reg, failure, now, rand.IntN)
	ev := p.log.Warn().Err(failure).Str("component", "processor").Str("queue", u.Queue).
		Str("jid", job.JID()).Str("class", job.Class())
	var o *fetch.Outcome
	switch {
	case !plan.retryAt.IsZero():
		o = &fetch.Outcome{Set: contract.KeyRetry, At: plan.retryAt, Payload: plan.payload}
		ev.Time("retry_at", plan.retryAt).Msg(fmt.Sprintf("job failed; retry %d/%d at %s", plan.retryCount+1, plan.maxRetries, clockTime(plan.retryAt, now)))
	case plan.toDead:
		o = &fetch.Outcome{Set: contract.KeyDead, At: now, Payload: plan.payload}
		ev.Msg("job failed; moved to the dead set (" + plan.why + ")")
	default:
		o = &fetch.Outcome{}
		ev.Msg("job failed; discarded (" + plan.why + ")")
	}
	p.fetcher.Finish(u, o)
	if o.Set != "" {
		p.markOwnEntry(job.JID(), now)
	}
	if plan.retryAt.IsZero() && !uniqueUntilStart(job) {
		// Dead or discarded: no run will release the lock.
		p.releaseUnique(job)
	}
	if plan.died && plan.job != nil {
		p.death(plan.job, failure)
	}
}

// clockTime is at as a log line shows it: the local time of day, with the
// date when it is not today's.
func clockTime(at, now time.Time) string {
	at, now = at.Local(), now.Local()
	if at.YearDay() == now.YearDay() && at.Year() == now.Year() {
		return at.Format("15:04:05")
	}
	return at.Format("2006-01-02 15:04:05")
}

// errorMessage is exception.message.to_s[0, 10_000], scrubbed to UTF-8.
func errorMessage(err error) string {
	msg := scrub(err.Error())
	if utf8.RuneCountInString(msg) > maxErrorMessage {
		r := []rune(msg)
		msg = string(r[:maxErrorMessage])
	}
	return msg
}

// scrub is Ruby's String#scrub for UTF-8: every maximal invalid subsequence
// (a lone bad byte, or the valid start of a truncated sequence) becomes one
// U+FFFD. strings.ToValidUTF8 would merge a run of them into one.
func scrub(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r != utf8.RuneError || n > 1 {
			b.WriteString(s[i : i+n])
			i += n
			continue
		}
		b.WriteRune(utf8.RuneError)
		i += invalidPrefixLen(s[i:])
	}
	return b.String()
}

// invalidPrefixLen is the length of the maximal subpart of an ill-formed
// UTF-8 sequence at the start of s (Unicode §3.9, as Ruby's scrub): the
// longest prefix that could start a well-formed sequence, at least 1.
func invalidPrefixLen(s string) int {
	c := s[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for ; n <= need && n < len(s); n++ {
		if s[n] < lo || s[n] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
	}
	return n
}

// backtraceLines applies the job's "backtrace" option as JobRetry does:
// `true` keeps every line, any other truthy value v keeps
// `lines[0...v.to_i]` (to_i of a string reads its leading integer, of a
// float truncates; 0 keeps none, a negative count drops lines from the end).
func backtraceLines(opt rubyjson.Value, lines []string) []string {
	if b, ok := opt.Bool(); ok && b {
		return lines
	}
	var n int64
	switch opt.Kind() {
	case rubyjson.Integer:
		n, _ = opt.Int()
	case rubyjson.Float:
		f, _ := opt.Float()
		n = int64(f)
	case rubyjson.String:
		str, _ := opt.Str()
		n = contract.RubyToI(str) // api.go
	}
	end := int64(len(lines))
	if n >= 0 {
		end = min(n, end)
	} else {
		end += n
	}
	if end <= 0 {
		return []string{}
	}
	return lines[:end]
}

// backtraceOf returns the failure's stack lines, or one line naming where
// the error surfaced when it carries none.
func backtraceOf(err error) []string {
	var st stackTracer
	if errors.As(err, &st) {
		if lines := st.StackTrace(); len(lines) > 0 {
			return lines
		}
	}
	return []string{"(go error without a stack trace: " + ErrorClassOf(err) + ")"}
}

// failedAtFor reads failed_at as the target version's JobRetry does: 8.x by
// lexical type (integer = ms), 7.x always as seconds (`failed_at + rf <
// Time.now.to_f`, docs/sidekiq-wire.md#timestamps), so gojob decides exactly as a 7.x process
// would on the same payload.
func failedAtFor(msg *wire.Job, v wire.Version) (time.Time, bool) {
	if contract.MillisecondTimestamps(v) {
		return msg.Time("failed_at")
	}
	raw, ok := msg.Get("failed_at")
	if !ok {
		return time.Time{}, false
	}
	f, ok := raw.Float()
	if !ok {
		return time.Time{}, false
	}
	return contract.FromEpochSeconds(f), true
}
