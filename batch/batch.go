package batch

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// payloadKey is the payload key that names a job's batch.
const payloadKey = contract.BatchPayloadKey

// proBatchKey is Sidekiq Pro's payload key for a job's batch.
const proBatchKey = "bid"

// keepAfterSuccess is how long a batch's hashes are kept after its
// success (30 days, as Sidekiq Pro keeps a batch's data).
const keepAfterSuccess = 30 * 24 * time.Hour

var (
	//go:embed lua/create.lua
	createSrc    string
	createScript = redis.NewScript(4, createSrc)
	//go:embed lua/push.lua
	pushSrc    string
	pushScript = redis.NewScript(4, pushSrc)
	//go:embed lua/update.lua
	updateSrc    string
	updateScript = redis.NewScript(3, updateSrc)
)

// ErrNotFound is returned for a batch id that does not exist.
var ErrNotFound = errors.New("batch: no such batch")

// ErrComplete is returned when a job or a child batch is added to a batch
// that has completed.
var ErrComplete = errors.New("batch: the batch has completed")

// Config configures Batches.
type Config struct {
	// Client pushes the batches' jobs (its middleware and extensions run)
	// and gives the pool, the clock and the wire format. Required.
	Client *sidekiq.Client
	// Logger logs the callbacks pushed and the refused Sidekiq Pro jobs.
	// Default none.
	Logger zerolog.Logger
}

func (c *Config) validate() error {
	if c.Client == nil {
		return errors.New("batch: Config.Client is required")
	}
	return nil
}

// Batches creates, fills, seals and reads batches, and is the
// sidekiq.Extension that records their jobs' successes.
type Batches struct {
	cfg Config
}

// New returns Batches.
func New(cfg *Config) (*Batches, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Batches{cfg: *cfg}, nil
}

// CreateParams describes a new batch.
type CreateParams struct {
	// Description is shown by status and the dashboard.
	Description string
	// OnSuccess is the class of the job pushed once every job succeeded;
	// OnComplete the class of the job pushed once every job succeeded or
	// died. Each is optional. A callback's args are [bid, "success"] or
	// [bid, "complete"].
	OnSuccess, OnComplete string
	// CallbackQueue is the callbacks' queue. Default "default".
	CallbackQueue string
	// Parent makes the batch a member of the batch Parent.
	Parent string
}

// Create creates an open batch: push its jobs, then Seal it.
func (b *Batches) Create(ctx context.Context, p *CreateParams) (*Status, error) {
	if p == nil {
		p = &CreateParams{}
	}
	bid := contract.NewJID()
	queue := p.CallbackQueue
	if queue == "" {
		queue = "default"
	}
	c := b.cfg.Client
	now := c.Clock().Now()
	v := c.Version()
	fields := []any{"description", p.Description, "callback_queue", queue, "parent", p.Parent}
	if v.AtLeast(8, 0, 0) {
		fields = append(fields, "ts_ms", "1")
	}
	for _, cb := range []struct{ field, class, event string }{
		{"success_job", p.OnSuccess, "success"}, {"complete_job", p.OnComplete, "complete"},
	} {
		if cb.class == "" {
			continue
		}
		fields = append(fields, "on_"+cb.event, cb.class)
		job, err := wire.NewJob(cb.class, bid, cb.event)
		if err != nil {
			return nil, fmt.Errorf("batch: %s callback: %w", cb.event, err)
		}
		job.SetQueue(queue)
		job.Set("retry", rubyjson.BoolValue(true))
		job.Set("jid", rubyjson.StringValue(contract.NewJID()))
		job.Set("created_at", contract.TimestampValue(now, v))
		fields = append(fields, cb.field, job.Bytes())
	}
	keys := []any{contract.BatchKey(bid), contract.KeyBatches, contract.BatchKey(p.Parent), contract.BatchJobsKey(p.Parent)}
	args := append([]any{bid, contract.Score(now), p.Parent}, fields...)
	n, err := b.script(ctx, createScript, keys, args)
	if err != nil {
		return nil, fmt.Errorf("batch: create: %w", err)
	}
	switch n {
	case -1:
		return nil, fmt.Errorf("batch: create under %s: %w", p.Parent, ErrNotFound)
	case -2:
		return nil, fmt.Errorf("batch: create under %s: %w", p.Parent, ErrComplete)
	case -3:
		return nil, fmt.Errorf("batch: create: batch id %s taken", bid)
	}
	return b.Status(ctx, bid)
}

// Push adds job to the batch bid and pushes it, in one step, through the
// client's middleware and extensions (PushPayload). ok is false when a
// middleware stopped the push. A job is added to a sealed batch only while
// the batch has not completed (from one of its own jobs, say); scheduled
// pushes are not supported.
func (b *Batches) Push(ctx context.Context, bid string, job *wire.Job) (jid string, ok bool, err error) {
	if bid == "" {
		return "", false, errors.New("batch: push: batch id is required")
	}
	job.Set(payloadKey, rubyjson.StringValue(bid))
	queue, payload, ok, err := b.cfg.Client.PushPayload(ctx, job)
	if err != nil || !ok {
		return "", ok, err
	}
	jid = job.JID()
	keys := []any{contract.BatchKey(bid), contract.BatchJobsKey(bid), contract.KeyQueues, contract.QueueKey(queue)}
	n, err := b.script(ctx, pushScript, keys, []any{jid, queue, payload})
	if err != nil {
		return "", false, fmt.Errorf("batch: push %s to %s: %w", jid, bid, err)
	}
	switch n {
	case -1:
		return "", false, fmt.Errorf("batch: push %s to %s: %w", jid, bid, ErrNotFound)
	case -2:
		return "", false, fmt.Errorf("batch: push %s to %s: %w", jid, bid, ErrComplete)
	}
	return jid, true, nil
}

// Seal closes the batch's list of jobs: from now on its callbacks fire as
// soon as its jobs have run (at once when they all have). Sealing twice
// does nothing.
func (b *Batches) Seal(ctx context.Context, bid string) error {
	_, err := b.update(ctx, "seal", bid, "")
	if err != nil {
		return fmt.Errorf("batch: seal %s: %w", bid, err)
	}
	return nil
}

// update runs update.lua; it returns the callbacks pushed.
func (b *Batches) update(ctx context.Context, op, bid, member string) ([]string, error) {
	conn, err := b.cfg.Client.Pool().GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	now := b.cfg.Client.Clock().Now()
	reply, err := updateScript.DoContext(ctx, conn, contract.BatchKey(bid), contract.BatchJobsKey(bid), contract.KeyQueues,
		op, member, bid, contract.Score(now), now.UnixMilli(), int64(keepAfterSuccess/time.Second))
	if err != nil {
		return nil, err
	}
	if n, ok := reply.(int64); ok && n == -1 {
		return nil, ErrNotFound
	}
	return redis.Strings(reply, nil)
}

func (b *Batches) script(ctx context.Context, s *redis.Script, keys, args []any) (int64, error) {
	conn, err := b.cfg.Client.Pool().GetContext(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	return redis.Int64(s.DoContext(ctx, conn, append(keys, args...)...))
}

// PayloadKeys are the payload keys of the jobs Run concerns: a batch's
// jobs and Sidekiq Pro's (sidekiq.ScopedExtension). The server runs other
// jobs without calling Run.
func (b *Batches) PayloadKeys() []string { return []string{payloadKey, proBatchKey} }

// Run runs a job and, when it belongs to a batch and succeeds, records
// its success and pushes the callbacks that became due, before the job is
// acknowledged (sidekiq.RunHook). A job of a Sidekiq Pro batch is
// refused: the dead set, not run.
func (b *Batches) Run(ctx context.Context, run *sidekiq.Run, next func(context.Context) error) error {
	bid, ok := stringField(run.Job, payloadKey)
	if !ok {
		if pro, isPro := stringField(run.Job, proBatchKey); isPro {
			return sidekiq.Kill(sidekiq.WithErrorClass("Gojob::UnsupportedBatch", fmt.Errorf(
				"job of Sidekiq Pro batch %s not run: gojob cannot keep a Pro batch's bookkeeping (docs/batches.md); retry it in a Sidekiq Pro process", pro)))
		}
		return next(ctx)
	}
	if err := next(ctx); err != nil {
		var d interface{ Discarded() bool }
		if errors.As(err, &d) && d.Discarded() {
			// Neither retried nor in the dead set: its last run, a death
			// for the batch.
			b.record(ctx, "dead", bid, run.Job.JID())
		}
		return err // a retry, or a death (JobDied)
	}
	pushed, err := b.update(context.WithoutCancel(ctx), "ok", bid, run.Job.JID())
	if err != nil && !errors.Is(err, ErrNotFound) {
		// Not recorded: the job fails and runs again, and its success is
		// recorded then (recording twice changes nothing).
		return fmt.Errorf("batch: record the success of %s in %s: %w", run.Job.JID(), bid, err)
	}
	b.logPushed(pushed)
	return nil
}

// JobDied records the death of a batch's job (sidekiq.DeathHook; for the
// jobs killed through the api package, set b.JobDied in
// api.Config.DeathHandlers).
func (b *Batches) JobDied(ctx context.Context, job *wire.Job, _ error) {
	bid, ok := stringField(job, payloadKey)
	if !ok {
		return
	}
	b.record(ctx, "dead", bid, job.JID())
}

// record records a member's state, logging a failure: Reconcile finds a
// death not recorded.
func (b *Batches) record(ctx context.Context, state, bid, jid string) {
	pushed, err := b.update(context.WithoutCancel(ctx), state, bid, jid)
	if err != nil && !errors.Is(err, ErrNotFound) {
		b.cfg.Logger.Error().Str("component", "batch").Str("bid", bid).Str("jid", jid).Err(err).Msg("end of a batch job not recorded")
		return
	}
	b.logPushed(pushed)
}

// Reconcile records as dead the batch's pending jobs found in the dead
// set, and returns the batch's status. Deaths are recorded as they happen
// (JobDied), but some reach the dead set unseen: a kill -9 between a
// job's move to the dead set and its death handler, a Kill from Ruby's Web
// UI. gojob batch status and the dashboard reconcile a sealed batch that
// still has pending jobs.
func (b *Batches) Reconcile(ctx context.Context, bid string) (*Status, error) {
	conn, err := b.cfg.Client.Pool().GetContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("batch: reconcile %s: %w", bid, err)
	}
	defer conn.Close()
	members, err := redis.StringMap(redis.DoContext(conn, ctx, "HGETALL", contract.BatchJobsKey(bid)))
	if err != nil {
		return nil, fmt.Errorf("batch: reconcile %s: %w", bid, err)
	}
	var pending []string
	for m, state := range members {
		if state == "pending" && !strings.HasPrefix(m, "batch:") {
			pending = append(pending, m)
		}
	}
	if len(pending) > 0 {
		dead, err := contract.FindInSet(ctx, conn, contract.KeyDead, pending)
		if err != nil {
			return nil, fmt.Errorf("batch: reconcile %s: %w", bid, err)
		}
		for jid := range dead {
			pushed, err := b.update(ctx, "dead", bid, jid)
			if err != nil {
				return nil, fmt.Errorf("batch: reconcile %s: %w", bid, err)
			}
			b.logPushed(pushed)
		}
	}
	return b.Status(ctx, bid)
}

func (b *Batches) logPushed(pushed []string) {
	for _, p := range pushed {
		b.cfg.Logger.Info().Str("component", "batch").Str("callback", p).Msg("batch callback pushed")
	}
}

func stringField(job *wire.Job, key string) (string, bool) {
	v, ok := job.Get(key)
	if !ok {
		return "", false
	}
	s, ok := v.Str()
	return s, ok && s != ""
}

// parseInt reads a hash field.
func parseInt(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
