package durable

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
)

// pgGroupConns holds the connections PostgreSQL group writes go through:
// pgx connections of their own, outside database/sql's pool (which keeps
// serving everything else). A group is one statement, and database/sql's
// layers (driver.Value conversion of every array, a pool checkout, the
// Rows wrapper) cost about as much client CPU as the statement itself.
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
type pgGroupConns struct {
	cfg  *pgx.ConnConfig
	idle chan *pgx.Conn

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

// get returns an idle connection or dials one.
func (p *pgGroupConns) get(ctx context.Context) (*pgx.Conn, error) {
	for {
		select {
		case c := <-p.idle:
			if !c.IsClosed() {
				return c, nil
			}
		default:
			return pgx.ConnectConfig(ctx, p.cfg)
		}
	}
}

// put returns c for the next group; a connection that failed (closed,
// or broken by a connection error or a timeout) is closed instead.
func (p *pgGroupConns) put(c *pgx.Conn, broken bool) {
	if broken || c.IsClosed() {
		c.Close(context.Background())
		return
	}
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
