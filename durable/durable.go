package durable

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/durable/internal/store"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/monoclock"
	"github.com/gojob/gojob/sidekiq/wire"
)

// defaultExtension is Amigo's default heartbeat_extension.
const defaultExtension = 5 * time.Minute

// allClasses, as a key of Config.Classes, makes every job class durable
// (with that entry's extension) unless it has an entry of its own.
const allClasses = "*"

// errNoDatabase reports that no storage database accepted a write. It
// wraps the errors of each database.
var errNoDatabase = errors.New("durable: no database available")

// defaultMaxPendingWrites bounds the writes kept for retry while a
// database does not answer.
const defaultMaxPendingWrites = 100_000

// Config configures a Durable.
type Config struct {
	// URLs are the storage databases, in order: postgres:// (or
	// postgresql://, or a libpq key=value string) and sqlite:PATH. Writes go
	// to the first that accepts them; lookups walk them in order. A
	// database named again (the same user, hosts and database, or the same
	// SQLite file) is used once, at its first place. Required.
	URLs []string
	// Schema is the PostgreSQL schema of the table. Default "public". The
	// SQLite store ignores it.
	Schema string
	// Table is the table name. Default "durable_jobs".
	Table string
	// Classes are the durable job classes and their heartbeat extension (0
	// means DefaultExtension), the Go form of `include Amigo::DurableJob`
	// and `def self.heartbeat_extension`. An ActiveJob payload matches by
	// its wrapped class. The key allClasses makes every class durable.
	Classes map[string]time.Duration
	// DefaultExtension is the extension of classes configured with 0, and
	// the one the reconciler uses for rows of classes this process does
	// not know (for example written by Ruby processes sharing the table).
	// Default 5 minutes, Amigo's default heartbeat_extension.
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
	// defaultMaxPendingWrites; beyond it a write is dropped and logged.
	MaxPendingWrites int
	// Logger receives the middleware's logs. Default: none.
	Logger zerolog.Logger
	// Adopt makes a job of a durable class that starts without a row in
	// any database (pushed by a producer without the client extension:
	// another language, a bare LPUSH) get one, written then and locked as
	// any other, so that who pushed a job does not decide whether it is
	// protected. Without it such a job runs without a row, with Amigo's
	// "no row found in database" error.
	Adopt bool

	// retryMin and retryMax bound the backoff of pending writes (tests).
	retryMin, retryMax time.Duration
}

func (c *Config) withDefaults() *Config {
	out := *c
	out.Schema = cmp.Or(out.Schema, "public")
	out.Table = cmp.Or(out.Table, "durable_jobs")
	out.DefaultExtension = cmp.Or(out.DefaultExtension, defaultExtension)
	out.ConnectTimeout = cmp.Or(out.ConnectTimeout, 5*time.Second)
	out.OpTimeout = cmp.Or(out.OpTimeout, 10*time.Second)
	out.MaxConns = cmp.Or(out.MaxConns, 10)
	out.MaxBatch = cmp.Or(out.MaxBatch, 1000)
	out.MaxPendingWrites = cmp.Or(out.MaxPendingWrites, defaultMaxPendingWrites)
	out.Clock = monoclock.Or(out.Clock)
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
// Reconciler and moved to the dead set. It is a sidekiq.Extension: add it
// to every client that pushes jobs and every server that runs them
// (Client.Extend, Server.Extend). It is safe for concurrent use.
type Durable struct {
	cfg    *Config
	log    zerolog.Logger
	stores []store.Store
	pend   *store.Pending

	closeOnce sync.Once
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
	d := &Durable{cfg: c, log: c.Logger, pend: store.NewPending(store.PendingConfig{Log: c.Logger, Clock: c.Clock,
		Max: c.MaxPendingWrites, MinDelay: c.retryMin, MaxDelay: c.retryMax})}
	o := store.Options{Schema: c.Schema, Table: c.Table, ConnectTimeout: c.ConnectTimeout, OpTimeout: c.OpTimeout,
		MaxConns: c.MaxConns, BatchWindow: c.BatchWindow, MaxBatch: c.MaxBatch, Release: releaseAcks}
	seen := map[string]bool{}
	for _, u := range c.URLs {
		// One database named twice (a flag and DATABASE_URL) is one
		// store: its rows are not looked up, reconciled or migrated twice.
		key := store.DatabaseKey(u)
		if seen[key] {
			continue
		}
		seen[key] = true
		st, err := store.Open(strings.TrimSpace(u), o)
		if err != nil {
			d.Close()
			return nil, err
		}
		d.stores = append(d.stores, st)
	}
	return d, nil
}

// Close ends the durable side at shutdown, after the server stopped
// running jobs: it ends the background retry of the writes that finish
// jobs' rows and failed because their database did not answer, tries each
// once more within Config.OpTimeout, logs those still pending at error
// level (jid, database, write) for an operator to act on, and closes the
// databases. Its error says how many writes were left (nil when none was
// and every database closed). Writes that fail later are logged, not
// retried; a second Close does nothing.
func (d *Durable) Close() error {
	var errs []error
	d.closeOnce.Do(func() {
		if d.pend != nil {
			ctx, cancel := context.WithTimeout(context.Background(), d.cfg.OpTimeout)
			errs = append(errs, d.pend.Stop(ctx))
			cancel()
		}
		for _, s := range d.stores {
			errs = append(errs, s.Close())
		}
	})
	return errors.Join(errs...)
}

// Databases returns the storage databases in order, without passwords.
func (d *Durable) Databases() []string {
	out := make([]string, len(d.stores))
	for i, s := range d.stores {
		out[i] = s.Name()
	}
	return out
}

// extension returns the heartbeat extension of a job class and whether the
// class is durable.
func (d *Durable) extension(class string) (time.Duration, bool) {
	ext, ok := d.cfg.Classes[class]
	if !ok {
		ext, ok = d.cfg.Classes[allClasses]
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
	if contract.IsActiveJobWrapper(class) {
		if w := wrappedClass(job); w != "" {
			if ext, ok := d.cfg.Classes[w]; ok {
				return cmp.Or(ext, d.cfg.DefaultExtension), true
			}
		}
	}
	return d.extension(class)
}

func wrappedClass(job *wire.Job) string {
	if w := contract.Wrapped(job); w != "" {
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
	if contract.IsActiveJobWrapper(class) {
		// As the middleware resolve it: the wrapped class first, then the
		// wrapper's own entry or allClasses.
		if j, err := wire.ParseJob([]byte(itemJSON)); err == nil {
			if ext, ok := d.jobExtension(j); ok {
				return ext
			}
		}
	}
	if ext, ok := d.extension(class); ok {
		return ext
	}
	return d.cfg.DefaultExtension
}

// Row is a durable_jobs row as Rows returns it.
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

func exportRow(r *store.Row, db string) *Row {
	out := &Row{Database: db, JobID: r.JobID, JobClass: r.JobClass, ItemJSON: r.ItemJSON, Queue: r.Queue,
		InsertedAt: r.InsertedAt, AssumeDeadAt: r.AssumeDeadAt, LockedAt: r.LockedAt, MissingAt: r.MissingAt}
	if r.LockedBy != nil {
		out.LockedBy = *r.LockedBy
	}
	return out
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
// the result lists every database, in order, either way.
func (d *Durable) Migrate(ctx context.Context) ([]DatabaseMigration, error) {
	var res []DatabaseMigration
	var errs []error
	for _, s := range d.stores {
		m := DatabaseMigration{Database: s.Name()}
		out, err := s.Migrate(ctx)
		if err != nil {
			m.Err = err
			errs = append(errs, fmt.Errorf("durable: migrate %s: %w", s.Name(), err))
		} else {
			m.Created, m.AddedMissingAt = out.Created, out.AddedMissingAt
			if out.AddedIndex {
				d.log.Info().Str("component", "durable").Str("database", s.Name()).Str("index", store.DueIndexName(d.cfg.Table)).
					Msg("added the reconciler's index on assume_dead_at")
			}
		}
		res = append(res, m)
	}
	return res, errors.Join(errs...)
}

// micro truncates t to what the databases keep.
func micro(t time.Time) time.Time { return store.Micro(t) }
