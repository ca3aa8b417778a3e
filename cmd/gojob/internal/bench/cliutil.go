package bench

import (
	"context"

	"github.com/gomodule/redigo/redis"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/internal/redisflag"
)

// The exit codes bench returns, from gojob's table (cli/exitcodes.go,
// printed by `gojob --help`).
const (
	exitFailed      = 1 // a failure not listed below
	exitUsage       = 2 // a bad flag value
	exitUnreachable = 3 // cannot reach Redis
)

func newJSONFlag() *ucli.BoolFlag {
	return &ucli.BoolFlag{Name: "json", Usage: "print JSON for scripts"}
}

// openPool opens a pool for the --redis flag and checks it answers, as
// the cli package's commands do.
func openPool(ctx context.Context, url string, maxActive int) (*redis.Pool, error) {
	return redisflag.Open(ctx, url, maxActive, exitUsage, exitUnreachable)
}
