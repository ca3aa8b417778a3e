package cli

import (
	"context"
	"fmt"

	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gojob/gojob/sidejob"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

type sjEnv struct {
	*cmdEnv
	sj *sidejob.Client
}

func withSideJob(f func(ctx context.Context, e *sjEnv) error) ucli.ActionFunc {
	return func(c *ucli.Context) error {
		return withRedis(c, func(base *cmdEnv) error {
			sj, err := sidejob.NewClient(&sidejob.Config{Pool: base.pool, Version: base.version})
			if err != nil {
				return err
			}
			return f(c.Context, &sjEnv{cmdEnv: base, sj: sj})
		})
	}
}

// job resolves the n-th argument as a job id or alias.
func (e *sjEnv) job(ctx context.Context, n int) (*sidejob.Job, error) {
	ref := e.c.Args().Get(n)
	if ref == "" {
		return nil, ucli.Exit(e.c.Command.Name+": JOB is required", exitUsage)
	}
	j, err := e.sj.Find(ctx, ref)
	if err != nil {
		return nil, err
	}
	if j == nil {
		return nil, ucli.Exit(fmt.Sprintf("no job %s", ref), exitNotFound)
	}
	return j, nil
}

// jobIDs returns the ids of all live jobs, in ascending order.
func (e *sjEnv) jobIDs(ctx context.Context) ([]int64, error) {
	conn, err := e.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return sidejobwire.JobIDs(ctx, conn)
}

// jsonArg parses a command-line value: JSON, or else a string.
func jsonArg(s string) rubyjson.Value {
	v, err := rubyjson.Parse([]byte(s))
	if err != nil {
		return rubyjson.StringValue(s)
	}
	return v
}
