package sidekiq

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// maxErrorMessage is Sidekiq's truncation of error_message (characters).
const maxErrorMessage = 10_000

// retryPlan is what the retry algorithm decided for one failure.
type retryPlan struct {
	// payload is the job to write (retry or dead set), nil when dropped.
	payload []byte
	job     *Job
	// retryAt is the retry score; zero means not retried.
	retryAt time.Time
	// toDead is true when the job goes to the dead set.
	toDead bool
	// died is true when the death handlers run.
	died bool
}

// planRetry applies Sidekiq's retry algorithm (spec §5.2-§5.3) for the target
// version to a failure of the job whose original bytes are raw, fetched from
// queue. reg is nil for an unknown class. It does not touch Redis.
func (s *Server) planRetry(queue string, raw []byte, reg *registration, failure error, now time.Time, rnd func(n int) int) retryPlan {
	v := s.cfg.Version
	var out *outcome
	errors.As(failure, &out)
	if out != nil && out.discard {
		return retryPlan{}
	}
	// The retry payload is built from the original bytes, not from what
	// middleware may have changed (JobRetry#global/local).
	msg, err := ParseJob(raw)
	if err != nil {
		return retryPlan{payload: raw, toDead: true}
	}
	rs := msg.Retry()
	if rv, ok := msg.Get("retry"); reg != nil && (!ok || rv.IsNull()) {
		// JobRetry#local: a missing retry takes the class option (default true).
		def := rubyjson.BoolValue(true)
		switch r := reg.opts.Retry.(type) {
		case bool:
			def = rubyjson.BoolValue(r)
		case int:
			def = rubyjson.IntValue(int64(r))
		}
		msg.Set("retry", def)
		rs = msg.Retry()
	}
	if !rs.Enabled {
		// retry: false, or absent on an unknown class: death handlers only.
		return retryPlan{job: msg, died: true}
	}
	max := rs.Max(s.cfg.MaxRetries)
	if rq := msg.RetryQueue(); rq != "" {
		msg.SetQueue(rq)
	} else {
		msg.SetQueue(queue)
	}
	msg.Set("error_message", rubyjson.StringValue(errorMessage(failure)))
	msg.Set("error_class", rubyjson.StringValue(ErrorClassOf(failure)))
	count := 0
	if c, ok := msg.RetryCount(); ok {
		count = c + 1
		msg.SetTime("retried_at", now, v)
	} else {
		msg.SetTime("failed_at", now, v)
	}
	msg.SetRetryCount(count)
	if all, limit := msg.Backtrace(); all || limit > 0 {
		lines := backtraceOf(failure)
		if !all && limit < len(lines) {
			lines = lines[:limit]
		}
		msg.SetErrorBacktrace(lines, v)
	}

	exhausted := count >= max
	if rf, ok := msg.RetryFor(); ok && v.AtLeast(7, 1, 3) {
		expired := false
		if fa, ok := msg.FailedAt(); ok {
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
			d, decision := reg.opts.RetryIn(count, failure, msg)
			switch decision {
			case RetryDiscard:
				return retryPlan{job: msg, died: v.AtLeast(8, 0, 7)}
			case RetryKill:
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
			return retryPlan{payload: msg.Encode(), job: msg, retryAt: now.Add(delay)}
		}
	}
	// Exhausted (or killed): the retries_exhausted hook, the dead set unless
	// dead: false or the hook discards, then the death handlers.
	toDead := msg.Dead()
	if reg != nil && reg.opts.RetriesExhausted != nil {
		if reg.opts.RetriesExhausted(s.hardCtx, msg, failure) == RetryDiscard {
			toDead = false
		}
	}
	if !toDead && v.AtLeast(8, 0, 8) {
		msg.Set("discarded_at", rubyjson.IntValue(now.UnixMilli()))
	}
	return retryPlan{payload: msg.Encode(), job: msg, toDead: toDead, died: true}
}

// jitter is Sidekiq's retry jitter: rand(10)*(count+1) up to 7.x,
// rand(10*(count+1)) from 8.0.
func jitter(v Version, count int, rnd func(n int) int) int {
	if count < 0 {
		count = 0
	}
	if v.AtLeast(8, 0, 0) {
		return rnd(10 * (count + 1))
	}
	return rnd(10) * (count + 1)
}

// handleFailure plans the retry and writes it, retrying through an outage.
func (s *Server) handleFailure(queue string, raw []byte, reg *registration, failure error) {
	now := s.cfg.Clock.Now()
	p := s.planRetry(queue, raw, reg, failure, now, rand.IntN)
	switch {
	case !p.retryAt.IsZero():
		err := s.withRetry(func(conn redis.Conn) error {
			_, err := conn.Do("ZADD", KeyRetry, Score(p.retryAt), p.payload)
			return err
		})
		if err != nil {
			s.log.Error().Err(err).Str("component", "retry").Bytes("payload", p.payload).Msg("could not schedule retry")
		}
	case p.toDead:
		s.bury(p.payload)
	}
	if p.died && p.job != nil {
		s.death(p.job, failure)
	}
}

// errorMessage is exception.message.to_s[0, 10_000], scrubbed to UTF-8.
func errorMessage(err error) string {
	msg := strings.ToValidUTF8(err.Error(), "\uFFFD")
	if utf8.RuneCountInString(msg) > maxErrorMessage {
		r := []rune(msg)
		msg = string(r[:maxErrorMessage])
	}
	return msg
}

// backtraceOf returns the failure's stack lines, or one line naming where
// the error surfaced when it carries none.
func backtraceOf(err error) []string {
	var st StackTracer
	if errors.As(err, &st) {
		if lines := st.StackTrace(); len(lines) > 0 {
			return lines
		}
	}
	return []string{"(go error without a stack trace: " + ErrorClassOf(err) + ")"}
}
