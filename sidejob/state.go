package sidejob

import (
	"context"
	cryptorand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/lease"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// State returns the job's state hash, each field decoded from JSON (the
// gem's state; its get(key) is State(ctx) then Get(key) on the map).
func (j *Job) State(ctx context.Context) (*rubyjson.Map, error) {
	if err := j.checkExists(ctx); err != nil {
		return nil, err
	}
	kv, err := redis.Strings(j.c.do(ctx, "HGETALL", j.key("state")))
	if err != nil {
		return nil, fmt.Errorf("sidejob: job %d state: %w", j.id, err)
	}
	m := rubyjson.NewMap()
	for i := 0; i+1 < len(kv); i += 2 {
		v, err := rubyjson.Parse([]byte(kv[i+1]))
		if err != nil {
			return nil, fmt.Errorf("sidejob: job %d state %s: %w", j.id, kv[i], err)
		}
		m.Set(kv[i], v)
	}
	return m, nil
}

// get returns one state field; ok is false when it is missing.
func (j *Job) get(ctx context.Context, key string) (v rubyjson.Value, ok bool, err error) {
	if err := j.checkExists(ctx); err != nil {
		return v, false, err
	}
	raw, err := redis.Bytes(j.c.do(ctx, "HGET", j.key("state"), key))
	if errors.Is(err, redis.ErrNil) {
		return v, false, nil
	}
	if err != nil {
		return v, false, fmt.Errorf("sidejob: job %d get %s: %w", j.id, key, err)
	}
	v, err = rubyjson.Parse(raw)
	if err != nil {
		return v, false, fmt.Errorf("sidejob: job %d state %s: %w", j.id, key, err)
	}
	return v, true, nil
}

// Set stores one state field as JSON (value converted with rubyjson.FromGo).
func (j *Job) Set(ctx context.Context, key string, value any) error {
	m := rubyjson.NewMap()
	v, err := toValue(value)
	if err != nil {
		return fmt.Errorf("sidejob: job %d set %s: %w", j.id, key, err)
	}
	m.Set(key, v)
	return j.setMany(ctx, m)
}

// setMany stores several state fields in one HSET (Ruby's set(hash)); an
// empty map is a no-op.
func (j *Job) setMany(ctx context.Context, fields *rubyjson.Map) error {
	if err := j.checkExists(ctx); err != nil {
		return err
	}
	if fields.Len() == 0 {
		return nil
	}
	args := []any{j.key("state")}
	for i := 0; i < fields.Len(); i++ {
		k, v := fields.At(i)
		args = append(args, k, v.Encode())
	}
	if _, err := j.c.do(ctx, "HSET", args...); err != nil {
		return fmt.Errorf("sidejob: job %d set: %w", j.id, err)
	}
	return nil
}

// lockOpts tune Job.lock. A nil *lockOpts means 3 tries with up to 0.2 s
// between them.
type lockOpts struct {
	// Retries is the number of attempts (default 3).
	Retries int
	// RetryDelay bounds the random wait after a failed attempt (default
	// 200 ms).
	RetryDelay time.Duration
}

// lock takes the job lock for ttl (SET job:<id>:lock <uuid> NX EX ttl) and
// returns its token, or "" when the lock is held by someone else after all
// attempts. The token is a random UUID, as Ruby's SecureRandom.uuid.
func (j *Job) lock(ctx context.Context, ttl time.Duration, o *lockOpts) (string, error) {
	retries, delay := 3, 200*time.Millisecond
	if o != nil {
		if o.Retries > 0 {
			retries = o.Retries
		}
		if o.RetryDelay > 0 {
			delay = o.RetryDelay
		}
	}
	secs := max(int64(ttl/time.Second), 1)
	token := newUUID()
	for attempt := 0; attempt < retries; attempt++ {
		reply, err := j.c.do(ctx, "SET", j.key("lock"), token, "NX", "EX", secs)
		if err != nil {
			return "", fmt.Errorf("sidejob: job %d lock: %w", j.id, err)
		}
		if reply != nil {
			return token, nil
		}
		wait := time.Duration(rand.Int64N(int64(delay) + 1))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", ctx.Err()
		case <-t.C:
		}
	}
	return "", nil
}

// unlock releases the lock if it still holds token (compare-and-delete, so
// Go and Ruby processes only release their own locks).
func (j *Job) unlock(ctx context.Context, token string) (bool, error) {
	conn, err := j.c.conn(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	ok, err := lease.Release(ctx, conn, j.key("lock"), token)
	if err != nil {
		return false, fmt.Errorf("sidejob: job %d unlock: %w", j.id, err)
	}
	return ok, nil
}

// newUUID returns a random version 4 UUID in its canonical text form.
func newUUID() string {
	var b [16]byte
	if _, err := cryptorand.Read(b[:]); err != nil {
		panic("sidejob: crypto/rand failed: " + err.Error())
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
