package durable

import (
	"database/sql"
	"sync"
)

// sqliteCheckpointer copies the WAL back into the database file from a
// connection of its own, so that the writer's commits rarely do it
// themselves: SQLite runs an automatic checkpoint inside the commit that
// crosses wal_autocheckpoint, and every job waiting for that group's lock
// waits for the copy too. A PASSIVE checkpoint does not block the writer.
// The writer's own automatic checkpoint (wal_autocheckpoint, openSQLite)
// stays as the backstop if this one falls behind.
type sqliteCheckpointer struct {
	dsn     string
	db      *sql.DB // opened with the first group commit
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	started bool
	commits int // since the last kick; the writer's only
}

// sqliteCheckpointEvery is how many group commits pass between two
// background checkpoints. A drain's group writes about 22 pages to the WAL
// (BenchmarkSQLiteDrainGroups), many of them the same pages group after
// group (the unique index's, the rows near the front of the queue), and a
// checkpoint copies each page once however often it was written since the
// last one: with 256 groups (a WAL of about 23 MB, under the writer's own
// 10,000-page backstop) instead of 64, a drain of 36,000 jobs copied
// 11,860 pages into the database file instead of 20,214. The CPU per job
// it saves was within the noise (BenchmarkSQLiteDrainGroups, two sets:
// 47.3 against 46.9 and 42.9 against 47.9 µs).
const sqliteCheckpointEvery = 256

func newSQLiteCheckpointer(dsn string) *sqliteCheckpointer {
	return &sqliteCheckpointer{dsn: dsn, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// committed counts a group commit and wakes the checkpointer every
// sqliteCheckpointEvery of them. Called by the writer only.
func (c *sqliteCheckpointer) committed() {
	c.once.Do(func() {
		db, err := sql.Open("sqlite", c.dsn)
		if err != nil {
			return // the writer's automatic checkpoints do the work
		}
		db.SetMaxOpenConns(1)
		c.db, c.started = db, true
		go c.run()
	})
	if c.commits++; c.commits < sqliteCheckpointEvery {
		return
	}
	c.commits = 0
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *sqliteCheckpointer) run() {
	defer close(c.done)
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
			// Best effort: a busy or failing checkpoint leaves the work to
			// the next one or to the writer's automatic checkpoint.
			c.db.Exec(`PRAGMA wal_checkpoint(PASSIVE)`)
		}
	}
}

// close stops the checkpointer; the writer has stopped (groupCommit.close
// returned).
func (c *sqliteCheckpointer) close() {
	c.once.Do(func() {}) // never started after this
	close(c.stop)
	if c.started {
		<-c.done
		c.db.Close()
	}
}
