package durable

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// DefaultExtension is Amigo's default heartbeat_extension.
const DefaultExtension = 5 * time.Minute

// AllClasses, as a key of Config.Classes, makes every job class durable
// (with that entry's extension) unless it has an entry of its own.
const AllClasses = "*"

// ErrNoDatabase reports that no storage database accepted a write. It
// wraps the errors of each database.
var ErrNoDatabase = errors.New("durable: no database available")

// Config configures a Durable.
type Config struct {
	// URLs are the storage databases, in order: postgres:// (or
	// postgresql://, or a libpq key=value string) and sqlite:PATH. Writes go
	// to the first that accepts them; lookups walk them in order. Required.
	URLs []string
	// Schema is the PostgreSQL schema of the table. Default "public". The
	// SQLite store ignores it.
	Schema string
	// Table is the table name. Default "durable_jobs".
	Table string
	// Classes are the durable job classes and their heartbeat extension (0
	// means DefaultExtension), the Go form of `include Amigo::DurableJob`
	// and `def self.heartbeat_extension`. An ActiveJob payload matches by
	// its wrapped class. The key AllClasses makes every class durable.
	Classes map[string]time.Duration
	// DefaultExtension replaces DefaultExtension (5 minutes): the extension
	// of classes configured with 0, and the one the reconciler uses for
	// rows of classes this process does not know (for example written by
	// Ruby processes sharing the table).
	DefaultExtension time.Duration
	// ConnectTimeout bounds a PostgreSQL connection attempt. Default 5 s.
	ConnectTimeout time.Duration
	// OpTimeout bounds one statement; a database that does not answer in
	// time counts as unreachable. Default 10 s.
	OpTimeout time.Duration
	// MaxConns is the connection limit per PostgreSQL database, the group
	// commit's connection included. Default 10; `gojob work` sizes it to
	// its concurrency.
	MaxConns int
	// BatchWindow is how long a push's insert, a lock or a success delete
	// may wait for other writes to share its statement while the database
	// is idle (see group commit in the package doc). 0, the default, waits
	// for none: writes that arrive while an earlier group is being written
	// are grouped, so batches grow with the load by themselves. (The wait
	// after a group of locks for the jobs it released, see the package
	// doc, is separate and needs no setting.)
	BatchWindow time.Duration
	// MaxBatch bounds the writes of one group. Default 1000.
	MaxBatch int
	// Clock is the time source. Default the system clock.
	Clock clock.Clock
	// MaxPendingWrites bounds the writes that finish jobs' rows (success
	// delete, failure unlock, stale copy removal) kept in memory for retry
	// while their database does not answer. Default
	// DefaultMaxPendingWrites; beyond it a write is dropped and logged.
	MaxPendingWrites int
	// Logger receives the middleware's logs. Default: none.
	Logger zerolog.Logger

	// retryMin and retryMax bound the backoff of pending writes (tests).
	retryMin, retryMax time.Duration
}

func (c *Config) withDefaults() *Config {
	out := *c
	out.Schema = cmp.Or(out.Schema, "public")
	out.Table = cmp.Or(out.Table, "durable_jobs")
	out.DefaultExtension = cmp.Or(out.DefaultExtension, DefaultExtension)
	out.ConnectTimeout = cmp.Or(out.ConnectTimeout, 5*time.Second)
	out.OpTimeout = cmp.Or(out.OpTimeout, 10*time.Second)
	out.MaxConns = cmp.Or(out.MaxConns, 10)
	out.MaxBatch = cmp.Or(out.MaxBatch, 1000)
	out.MaxPendingWrites = cmp.Or(out.MaxPendingWrites, DefaultMaxPendingWrites)
	out.retryMin = cmp.Or(out.retryMin, pendingRetryMin)
	out.retryMax = max(cmp.Or(out.retryMax, pendingRetryMax), out.retryMin)
	out.Clock = clock.Or(out.Clock)
	return &out
}

func (c *Config) validate() error {
	if len(c.URLs) == 0 {
		return errors.New("durable: Config.URLs needs at least one database")
	}
	for _, u := range c.URLs {
		if strings.TrimSpace(u) == "" {
			return errors.New("durable: empty database URL")
		}
	}
	if c.DefaultExtension < 0 || c.ConnectTimeout < 0 || c.OpTimeout < 0 || c.MaxConns < 0 || c.MaxPendingWrites < 0 ||
		c.BatchWindow < 0 || c.MaxBatch < 0 {
		return errors.New("durable: negative durations and limits are not allowed")
	}
	for class, ext := range c.Classes {
		if class == "" {
			return errors.New("durable: empty class name in Config.Classes")
		}
		if ext < 0 {
			return fmt.Errorf("durable: negative heartbeat extension for %s", class)
		}
	}
	return nil
}

// Durable keeps a shadow row per durable job in its storage databases, as
// Amigo::DurableJob does, so that a job Sidekiq loses is found by the
// Reconciler and moved to the dead set. Install ClientMiddleware on every
// client that pushes jobs and ServerMiddleware on every server that runs
// them. It is safe for concurrent use.
type Durable struct {
	cfg    *Config
	log    zerolog.Logger
	stores []store
	pend   *pendingWrites
}

// New opens the storage databases lazily: nothing is dialed until the
// first statement, so an unreachable database is only skipped at use.
func New(cfg *Config) (*Durable, error) {
	if cfg == nil {
		return nil, errors.New("durable: nil Config")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	d := &Durable{cfg: c, log: c.Logger, pend: newPendingWrites(c, c.Logger)}
	for _, u := range c.URLs {
		st, err := openStore(strings.TrimSpace(u), c)
		if err != nil {
			d.Close()
			return nil, err
		}
		d.stores = append(d.stores, st)
	}
	return d, nil
}

func openStore(u string, c *Config) (store, error) {
	if _, _, ok := sqlitePath(u); ok {
		return openSQLite(u, c.Table, c)
	}
	return openPostgres(u, c.Schema, c.Table, c)
}

// Stop ends the background retry of the writes that finish jobs' rows
// and failed because their database did not answer: it tries each once
// more within ctx, logs those still pending at error level (jid, database,
// write) for an operator to act on, and then returns an error wrapping
// ErrPendingWrites. Writes that fail later are logged, not retried. Call
// it at shutdown, after the server stopped running jobs and before Close.
// The retry loop starts by itself when a write is first queued.
func (d *Durable) Stop(ctx context.Context) error {
	return d.pend.stop(ctx)
}

// Close stops the retry of pending writes as Stop does (bounded by
// Config.OpTimeout) when Stop was not called, and closes the databases.
func (d *Durable) Close() error {
	var errs []error
	if d.pend != nil {
		ctx, cancel := context.WithTimeout(context.Background(), d.cfg.OpTimeout)
		errs = append(errs, d.pend.stop(ctx))
		cancel()
	}
	for _, s := range d.stores {
		errs = append(errs, s.close())
	}
	return errors.Join(errs...)
}

// Databases returns the storage databases in order, without passwords.
func (d *Durable) Databases() []string {
	out := make([]string, len(d.stores))
	for i, s := range d.stores {
		out[i] = s.name()
	}
	return out
}

// Extension returns the heartbeat extension of a job class and whether the
// class is durable.
func (d *Durable) Extension(class string) (time.Duration, bool) {
	ext, ok := d.cfg.Classes[class]
	if !ok {
		ext, ok = d.cfg.Classes[AllClasses]
	}
	if !ok {
		return 0, false
	}
	return cmp.Or(ext, d.cfg.DefaultExtension), true
}

// jobExtension resolves a job: by class, and for an ActiveJob payload by
// its wrapped class.
func (d *Durable) jobExtension(job *wire.Job) (time.Duration, bool) {
	class := job.Class()
	if wire.IsActiveJobWrapper(class) {
		if w := wrappedClass(job); w != "" {
			if ext, ok := d.cfg.Classes[w]; ok {
				return cmp.Or(ext, d.cfg.DefaultExtension), true
			}
		}
	}
	return d.Extension(class)
}

func wrappedClass(job *wire.Job) string {
	if w := job.Wrapped(); w != "" {
		return w
	}
	if a := job.Args(); len(a) > 0 {
		if m, ok := a[0].Map(); ok {
			v, _ := m.Get("job_class")
			s, _ := v.Str()
			return s
		}
	}
	return ""
}

// rowExtension is the extension the reconciler applies to a row: its
// class's (or wrapped class's), else the default. A class this process
// does not know is not an error: Ruby processes may share the table.
func (d *Durable) rowExtension(class, itemJSON string) time.Duration {
	if wire.IsActiveJobWrapper(class) {
		// As the middleware resolve it: the wrapped class first, then the
		// wrapper's own entry or AllClasses.
		if j, err := wire.ParseJob([]byte(itemJSON)); err == nil {
			if ext, ok := d.jobExtension(j); ok {
				return ext
			}
		}
	}
	if ext, ok := d.Extension(class); ok {
		return ext
	}
	return d.cfg.DefaultExtension
}

// InsertParams is one durable row to write (Amigo's insert_job).
type InsertParams struct {
	// Job is the item as pushed. Its "at" (epoch seconds), when present, is
	// the run time; otherwise now.
	Job *wire.Job
	// Queue defaults to the job's queue.
	Queue string
	// Extension defaults to the class's, or DefaultExtension.
	Extension time.Duration

	missingAt *time.Time // tests: a row that already had its first strike
}

// InsertResult reports where a row was written.
type InsertResult struct {
	// Database is the database that accepted the row.
	Database string
	// AssumeDeadAt is the row's deadline: run time + extension.
	AssumeDeadAt time.Time
	// Skipped lists the databases tried before, with their errors.
	Skipped []error
}

// Insert upserts the job's row into the first database that accepts it:
// assume_dead_at = run time + extension. A database that fails (connection
// or SQL error) is skipped; when none accepts the row the error wraps
// ErrNoDatabase. For a push again of a job, the removal of a copy that an
// earlier push may have left in a database that did not answer is retried
// in the background (see Outages in the package doc).
func (d *Durable) Insert(ctx context.Context, p *InsertParams) (*InsertResult, error) {
	up, err := d.rowFor(p)
	if err != nil {
		return nil, err
	}
	return d.insertRow(ctx, p.Job, up)
}

// rowFor builds the row of an insert.
func (d *Durable) rowFor(p *InsertParams) (upsertParams, error) {
	if p == nil || p.Job == nil {
		return upsertParams{}, errors.New("durable: insert: nil job")
	}
	job := p.Job
	jid := job.JID()
	if jid == "" {
		return upsertParams{}, errors.New("durable: insert: job has no jid")
	}
	ext := p.Extension
	if ext == 0 {
		ext = d.cfg.DefaultExtension
		if e, ok := d.jobExtension(job); ok {
			ext = e
		}
	}
	now := d.cfg.Clock.Now()
	runAt := now
	if v, ok := job.Get("at"); ok {
		if f, isNum := v.Float(); isNum {
			runAt = wire.FromEpochSeconds(f)
		}
	}
	return upsertParams{
		JobID:        jid,
		JobClass:     job.Class(),
		ItemJSON:     string(job.Encode()),
		Queue:        cmp.Or(p.Queue, job.Queue(), "default"),
		InsertedAt:   now,
		AssumeDeadAt: runAt.Add(ext),
		MissingAt:    p.missingAt,
	}, nil
}

// insertRow writes one row as Insert does.
func (d *Durable) insertRow(ctx context.Context, job *wire.Job, up upsertParams) (*InsertResult, error) {
	jid, now := up.JobID, up.InsertedAt
	res := &InsertResult{AssumeDeadAt: micro(up.AssumeDeadAt)}
	release := d.pend.settle(ctx, jid, d.stores)
	defer release()
	var unanswered []store
	for i, s := range d.stores {
		created, err := s.upsertCreated(ctx, up)
		if err == nil {
			res.Database = s.name()
			// A removal pending here meant a later database holds the jid's
			// row: this push made this row the current one instead.
			replacedStale := d.pend.supersede(s, jid) == pendingRemove
			if created && isRepush(job, now) || replacedStale {
				d.removeStaleCopies(ctx, jid, d.stores[i+1:])
			}
			if isRepush(job, now) {
				d.queueStaleRemovals(jid, unanswered)
			}
			return res, nil
		}
		if ctx.Err() != nil {
			return res, fmt.Errorf("durable: insert %s: %w", jid, err)
		}
		if s.isConnError(err) {
			unanswered = append(unanswered, s)
		}
		res.Skipped = append(res.Skipped, fmt.Errorf("%s: %w", s.name(), err))
	}
	return res, fmt.Errorf("durable: insert %s: %w", jid, errors.Join(append([]error{ErrNoDatabase}, res.Skipped...)...))
}

// repushSlack is how much older than now a job's created_at must be for a
// push to count as a push again of a job pushed before.
const repushSlack = time.Second

// isRepush reports whether job was created before this push: the
// scheduler's and the retry poller's re-pushes, a retry from the API, a
// push of the same jid from inside the job.
func isRepush(job *wire.Job, now time.Time) bool {
	created, ok := job.CreatedAt()
	return ok && created.Before(now.Add(-repushSlack))
}

// removeStaleCopies deletes a jid's rows from later databases after a push
// again of the job created its row in an earlier one. The earlier push
// wrote to a later database only because the earlier one failed then, and
// a copy left there would outlive the job: the worker locks and deletes
// the first row it finds, and the reconciler would kill the completed job
// from the stale copy. Only such re-pushes pay for these statements: a
// first push, or a re-push that found its row in place, asks no other
// database. A database that does not answer gets the removal queued for
// retry; one that fails otherwise keeps its copy.
func (d *Durable) removeStaleCopies(ctx context.Context, jid string, later []store) {
	for _, s := range later {
		removed, err := s.deleteJob(ctx, jid)
		switch {
		case err != nil && s.isConnError(err):
			d.queueStaleRemovals(jid, []store{s})
		case err != nil:
			d.log.Warn().Err(err).Str("component", "durable").Str("database", s.name()).Str("jid", jid).
				Msg("could not remove the stale durable row of a job pushed again")
		case removed:
			d.log.Info().Str("component", "durable").Str("database", s.name()).Str("jid", jid).
				Msg("removed the stale durable row of a job pushed again into an earlier database")
		}
	}
}

// queueStaleRemovals queues the removal of a jid's rows in databases that
// did not answer a push again of the job, which wrote its row to a later
// one: a copy left there from an earlier push would outlive the job.
func (d *Durable) queueStaleRemovals(jid string, unanswered []store) {
	for _, s := range unanswered {
		d.pend.add(&pendingWrite{st: s, jid: jid, kind: pendingRemove})
		d.log.Warn().Str("component", "durable").Str("database", s.name()).Str("jid", jid).
			Msg("a durable job pushed again may have a stale row in a database that does not answer; its removal is retried in the background")
	}
}

// lockResult is where the server middleware found and locked a row.
type lockResult struct {
	st       store
	lockedAt time.Time
	// failed lists the databases that could not be asked, with their
	// errors.
	failed       []error
	failedStores []store
}

// lockJob walks the databases in order and locks the row in the first one
// that has it (Amigo's lock_job, in one UPDATE instead of SELECT+UPDATE),
// after the jid's pending writes.
//
// It fills res; op is the lock's op in the first database (the caller's
// allocation), a later database gets one of its own.
func (d *Durable) lockJob(ctx context.Context, jid, identity string, now time.Time, ext time.Duration, res *lockResult, op *gcOp) {
	res.lockedAt = micro(now)
	release := d.pend.settle(ctx, jid, d.stores)
	defer release()
	for i, s := range d.stores {
		if i > 0 {
			op = &gcOp{}
		}
		*op = gcOp{kind: gcLock, lk: lockParams{JobID: jid, LockedBy: identity, LockedAt: now, AssumeDeadAt: now.Add(ext)}}
		found, err := s.lockOp(ctx, op)
		if err != nil {
			res.failed = append(res.failed, fmt.Errorf("%s: %w", s.name(), err))
			res.failedStores = append(res.failedStores, s)
			continue
		}
		if found {
			res.st = s
			return
		}
	}
}

// Get returns a job's row as the first database that has it holds it, or
// nil. For tests and tools.
func (d *Durable) Get(ctx context.Context, jid string) (*Row, error) {
	var errs []error
	for _, s := range d.stores {
		r, err := s.get(ctx, jid)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.name(), err))
			continue
		}
		if r != nil {
			return exportRow(r, s.name()), nil
		}
	}
	return nil, errors.Join(errs...)
}

// Row is a durable_jobs row as Get returns it.
type Row struct {
	// Database is where the row is.
	Database     string
	JobID        string
	JobClass     string
	ItemJSON     string
	Queue        string
	InsertedAt   time.Time
	AssumeDeadAt time.Time
	LockedBy     string
	LockedAt     *time.Time
	MissingAt    *time.Time
}

func exportRow(r *row, db string) *Row {
	out := &Row{Database: db, JobID: r.JobID, JobClass: r.JobClass, ItemJSON: r.ItemJSON, Queue: r.Queue,
		InsertedAt: r.InsertedAt, AssumeDeadAt: r.AssumeDeadAt, LockedAt: r.LockedAt, MissingAt: r.MissingAt}
	if r.LockedBy != nil {
		out.LockedBy = *r.LockedBy
	}
	return out
}

// MigrateResult reports Migrate per database.
type MigrateResult struct {
	Databases []DatabaseMigration
}

// DatabaseMigration is what Migrate did on one database.
type DatabaseMigration struct {
	// Database is the URL without its password.
	Database string
	// Created is true when the table was created.
	Created bool
	// AddedMissingAt is true when an old table got its missing_at column.
	AddedMissingAt bool
	// Err is set when the database could not be migrated.
	Err error
}

// Migrate creates the table in every database (CREATE TABLE IF NOT
// EXISTS, as Amigo's ensure_jobs_tables) and adds missing_at to tables
// created before it existed. It returns an error joining the failures;
// the result lists every database either way.
func (d *Durable) Migrate(ctx context.Context) (*MigrateResult, error) {
	res := &MigrateResult{}
	var errs []error
	for _, s := range d.stores {
		m := DatabaseMigration{Database: s.name()}
		out, err := s.migrate(ctx)
		if err != nil {
			m.Err = err
			errs = append(errs, fmt.Errorf("durable: migrate %s: %w", s.name(), err))
		} else {
			m.Created, m.AddedMissingAt = out.Created, out.AddedMissingAt
			if out.AddedIndex {
				d.log.Info().Str("component", "durable").Str("database", s.name()).Str("index", dueIndexName(d.cfg.Table)).
					Msg("added the reconciler's index on assume_dead_at")
			}
		}
		res.Databases = append(res.Databases, m)
	}
	return res, errors.Join(errs...)
}

// errorItem returns the job's JSON with error_class and error_message set,
// as the server middleware records a failure on the row.
func errorItem(job *wire.Job, failure error) string {
	j, err := wire.ParseJob(job.Bytes())
	if err != nil {
		j = job.Clone()
	}
	j.Set("error_class", rubyjson.StringValue(sidekiq.ErrorClassOf(failure)))
	j.Set("error_message", rubyjson.StringValue(truncateMessage(failure.Error())))
	return string(j.Encode())
}

// truncateMessage keeps Sidekiq's 10,000-character limit of error_message.
func truncateMessage(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if r := []rune(s); len(r) > 10_000 {
		return string(r[:10_000])
	}
	return s
}
