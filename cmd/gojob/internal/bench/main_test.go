package bench

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/gojob/gojob/cli"
	"github.com/gojob/gojob/internal/testlog"
)

// asGojob in the environment makes this test binary gojob itself (cmd/gojob's
// commands): the bench starts its worker with os.Executable(), which in a
// test is this binary.
const asGojob = "GOJOB_BENCH_TEST_AS_GOJOB"

func TestMain(m *testing.M) {
	if os.Getenv(asGojob) == "1" {
		os.Exit(cli.Run(context.Background(), os.Args, os.Stdout, os.Stderr,
			cli.WithCommand(Command()), cli.WithCommand(WorkerCommand())))
	}
	os.Setenv(asGojob, "1")
	// A bench a test runs without -r must not reach a Redis the test did
	// not start, such as a developer's on 6379: point the default nowhere.
	os.Setenv("REDIS_URL", "redis://127.0.0.1:1/0")
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// runGojob runs the in-process command line as cmd/gojob composes it: cli's
// commands plus bench. Tests that do so are not parallel: urfave/cli v2
// applies its package-level HelpFlag in every App, so two Apps parsing at
// once race.
func runGojob(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	out, errb := testlog.New(nil), testlog.New(nil)
	code := cli.Run(context.Background(), append([]string{"gojob"}, args...), out, errb, cli.WithCommand(Command()), cli.WithCommand(WorkerCommand()))
	return out.String(), errb.String(), code
}
