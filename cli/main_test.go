package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/gojob/gojob/internal/gojobtest"
)

func TestMain(m *testing.M) {
	// A command a test runs without -r (or with -r after an argument,
	// where it is an argument) must not reach a Redis the test did not
	// start, such as a developer's on 6379: point the default nowhere.
	os.Setenv("REDIS_URL", "redis://127.0.0.1:1/0")
	code := m.Run()
	gojobtest.Cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// gojobBinary builds the real gojob binary once per test run.
func gojobBinary(t testing.TB) string { return gojobtest.Binary(t) }

// testBinaries are the extra commands tests build (the gojob command line
// with test handlers), each once per run, beside the gojob binary.
var testBinaries sync.Map // package path → *testBinary

type testBinary struct {
	once sync.Once
	path string
	err  error
}

// buildTestBinary builds the command in pkg (relative to cli/) as name,
// once per run.
func buildTestBinary(t *testing.T, name, pkg string) string {
	t.Helper()
	dir := gojobtest.Dir(t) // removed by TestMain
	v, _ := testBinaries.LoadOrStore(pkg, &testBinary{})
	b := v.(*testBinary)
	b.once.Do(func() {
		b.path = filepath.Join(dir, name)
		if out, err := exec.Command("go", "build", "-o", b.path, pkg).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v: %s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}
