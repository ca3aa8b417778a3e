package fetch

import (
	_ "embed"
	"fmt"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/internal/contract"
)

// The reliable fetch's scripts (lua/), and the requeue that gives jobs
// back to their queues out of the in-progress lists.

var (
	//go:embed lua/reliable_finish.lua
	finishSrc string
	//go:embed lua/reliable_requeue.lua
	requeueSrc string
	//go:embed lua/reliable_recover.lua
	recoverSrc string

	finishScript  = redis.NewScript(2, finishSrc)
	requeueScript = redis.NewScript(2, requeueSrc)
	recoverScript = redis.NewScript(7, recoverSrc)
)

// loadScripts loads the fetch's scripts into Redis's script cache.
func loadScripts(conn redis.Conn) error {
	for _, s := range []*redis.Script{finishScript, requeueScript, recoverScript} {
		if err := s.Load(conn); err != nil {
			return err
		}
	}
	return nil
}

func requeue(cfg *Config, units []Unit) error {
	if len(units) == 0 {
		return nil
	}
	moved, err := requeueUnits(cfg, units)
	if err != nil {
		return err
	}
	// At shutdown an operator wants to know; a job given back because its
	// queue was paused or at its cap while it was on its way is routine.
	lvl := zerolog.DebugLevel
	if cfg.quiet() {
		lvl = zerolog.InfoLevel
	}
	cfg.Logger.WithLevel(lvl).Int("jobs", moved).Msg("requeued unfinished jobs")
	return nil
}

// requeueUnits moves units from their lists back to the pop end of their
// queues, one script per list, and returns how many it moved (those still
// in their lists). A failure logs the jobs of the list it could not
// requeue: they stay there and are recovered when this process is gone.
func requeueUnits(cfg *Config, units []Unit) (int, error) {
	type group struct {
		list, queue string
		raws        []any
	}
	var order []*group
	byList := map[string]*group{}
	for _, u := range units {
		g := byList[u.list]
		if g == nil {
			g = &group{list: u.list, queue: contract.QueueKey(u.Queue)}
			byList[u.list] = g
			order = append(order, g)
		}
		g.raws = append(g.raws, u.Raw)
	}
	moved := 0
	for _, g := range order {
		err := cfg.Writes.Do(func(conn redis.Conn) error {
			n, err := redis.Int(requeueScript.DoContext(cfg.Writes.Ctx, conn, append([]any{g.list, g.queue}, g.raws...)...))
			moved += n
			return err
		})
		if err != nil {
			for _, raw := range g.raws {
				cfg.Logger.Error().Err(err).Str("queue", contract.QueueName(g.queue)).Bytes("payload", raw.([]byte)).
					Msg("could not requeue job; it stays in the in-progress list and is recovered when this process is gone")
			}
			return moved, fmt.Errorf("sidekiq: requeue %d jobs: %w", len(g.raws), err)
		}
	}
	return moved, nil
}
