package durable

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// pgGroupConns holds the connections PostgreSQL group writes go through:
// pgx connections of their own, outside database/sql's pool (which keeps
// serving everything else). A group is one statement on the hot path, and
// database/sql adds client CPU to each (a pool checkout, a driver.Value
// conversion of every array, the Rows wrapper).
//
// They run with plan_cache_mode = force_generic_plan: the group statement
// is prepared once per connection, but with array parameters PostgreSQL's
// plan cache otherwise keeps choosing a custom plan and plans the whole
// three-part statement again on every execution (measured: about 0.25 ms
// of server CPU per group, as much as applying a dozen writes). The
// generic plan is the one every group wants: a nested loop over the
// unnested arrays with the job_id index.
//
// The generic plan is made once, at the connection's first group, often
// when the table is still empty (a bench, a fresh deployment): planned
// then, a scan of the whole table can look cheaper than the index, and
// that plan would stay. Sequential scans and hash and merge joins are
// therefore off on these connections; the statement has an index for
// every row it touches.
//
// After a connection error, on these connections or on database/sql's, the
// other idle connections are likely dead too (a restart, a cut network):
// each is pinged before its next use (suspect, shouldPing), as database/sql
// does on its own only for a connection idle for more than a second.
type pgGroupConns struct {
	cfg  *pgx.ConnConfig
	idle chan *pgx.Conn
	// epoch counts the connection errors seen; a connection records the
	// epoch it was last known good in.
	epoch atomic.Int64

	mu     sync.Mutex
	closed bool
}

// pgGroupParams are the group connections' settings (see pgGroupConns); a
// setting the URL gives wins.
var pgGroupParams = map[string]string{
	"plan_cache_mode":  "force_generic_plan",
	"enable_seqscan":   "off",
	"enable_hashjoin":  "off",
	"enable_mergejoin": "off",
}

func newPGGroupConns(pc *pgx.ConnConfig, slots int) *pgGroupConns {
	cfg := pc.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	for k, v := range pgGroupParams {
		if _, set := cfg.RuntimeParams[k]; !set {
			cfg.RuntimeParams[k] = v
		}
	}
	return &pgGroupConns{cfg: cfg, idle: make(chan *pgx.Conn, max(slots, 1))}
}

// get returns an idle connection (pinged first when it may be dead) or
// dials one.
func (p *pgGroupConns) get(ctx context.Context) (*pgx.Conn, error) {
	for {
		select {
		case c := <-p.idle:
			if c.IsClosed() {
				continue
			}
			last, _ := c.PgConn().CustomData()[pgLastUsedKey].(time.Time)
			if p.shouldPing(c, time.Since(last)) && c.PgConn().Ping(ctx) != nil {
				c.Close(context.Background())
				continue
			}
			return c, nil
		default:
			c, err := pgx.ConnectConfig(ctx, p.cfg)
			if err != nil {
				return nil, err
			}
			p.shouldPing(c, 0) // records the epoch
			return c, nil
		}
	}
}

const (
	pgEpochKey    = "gojob durable epoch"
	pgLastUsedKey = "gojob durable last used"
)

// suspect records a connection error: every connection is pinged before
// its next use.
func (p *pgGroupConns) suspect() { p.epoch.Add(1) }

// shouldPing reports whether c, idle for idle, may be dead: idle for more
// than a second (database/sql's rule) or not used since a connection error.
// It records the current epoch in c.
func (p *pgGroupConns) shouldPing(c *pgx.Conn, idle time.Duration) bool {
	data := c.PgConn().CustomData()
	e := p.epoch.Load()
	seen, known := data[pgEpochKey].(int64)
	data[pgEpochKey] = e
	return idle > time.Second || (known && seen != e)
}

// sqlPing is database/sql's ping rule for the store's other connections
// (stdlib.OptionShouldPing).
func (p *pgGroupConns) sqlPing(_ context.Context, sp stdlib.ShouldPingParams) bool {
	return p.shouldPing(sp.Conn, sp.IdleDuration)
}

// exec runs the prepared statement q on a group connection with params
// (all in binary format) and hands each row's values, in binary format, to
// read. q is prepared once per connection (pgStmtKey). A connection found
// dead before anything was sent (pgconn.SafeToRetry: an idle connection
// the server closed) is replaced and q sent once more, as database/sql
// does with driver.ErrBadConn.
func (p *pgGroupConns) exec(ctx context.Context, q string, params [][]byte, isConn func(error) bool, read func([][]byte) error) error {
	for attempt := 0; ; attempt++ {
		c, err := p.get(ctx)
		if err != nil {
			return err
		}
		err = func() error {
			sd, err := p.prepared(ctx, c, q)
			if err != nil {
				return err
			}
			rr := c.PgConn().ExecStatement(ctx, sd, params, pgBinary, pgBinary)
			var rerr error
			for rr.NextRow() {
				if rerr == nil {
					rerr = read(rr.Values())
				}
			}
			if _, err := rr.Close(); err != nil {
				return err
			}
			return rerr
		}()
		broken := err != nil && (isConn(err) || ctx.Err() != nil)
		p.put(c, broken)
		if broken && attempt == 0 && pgconn.SafeToRetry(err) && ctx.Err() == nil {
			continue
		}
		return err
	}
}

// pgBinary is the format codes of exec's parameters and results: all
// binary.
var pgBinary = []int16{1}

// pgStmtKey is where a group connection keeps its prepared group
// statement.
const pgStmtKey = "gojob durable group statement"

// prepared returns c's prepared statement of q, preparing it on first use.
func (p *pgGroupConns) prepared(ctx context.Context, c *pgx.Conn, q string) (*pgconn.StatementDescription, error) {
	data := c.PgConn().CustomData()
	if sd, ok := data[pgStmtKey].(*pgconn.StatementDescription); ok && sd.SQL == q {
		return sd, nil
	}
	sd, err := c.PgConn().Prepare(ctx, "gojob_durable_group", q, nil)
	if err != nil {
		return nil, err
	}
	data[pgStmtKey] = sd
	return sd, nil
}

// put returns c for the next group; a connection that failed (closed,
// or broken by a connection error or a timeout) is closed instead.
func (p *pgGroupConns) put(c *pgx.Conn, broken bool) {
	if broken || c.IsClosed() {
		c.Close(context.Background())
		return
	}
	c.PgConn().CustomData()[pgLastUsedKey] = time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close(context.Background())
		return
	}
	select {
	case p.idle <- c:
	default:
		c.Close(context.Background())
	}
}

// close closes the idle connections; one in use is closed when put back.
func (p *pgGroupConns) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	for {
		select {
		case c := <-p.idle:
			c.Close(context.Background())
		default:
			return
		}
	}
}
