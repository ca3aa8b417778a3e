package buildinfo

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestVersionPrefersTheStamp(t *testing.T) {
	old := version
	t.Cleanup(func() { version = old })
	version = "v1.2.3"
	if got := Version(); got != "v1.2.3" {
		t.Fatalf("Version() = %q, want the stamp v1.2.3", got)
	}
	version = ""
	if got := Version(); got == "" {
		t.Fatal("Version() is empty without a stamp; want the module version or devel")
	}
}

// buildStamped builds testdata/version, a main package that prints
// Version(), as make release builds gojob (static, trimmed paths, no VCS
// information) with extra ldflags, and returns the binary's path. Linking
// the whole of gojob with those flags would rebuild every dependency
// outside the build cache the other tests fill; the stamp is the same
// variable in any main package, and gojob prints buildinfo.Version()
// (cli's TestHelpShowsExitCodesAndVersion).
func buildStamped(t *testing.T, ldflags string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	bin := filepath.Join(t.TempDir(), "version")
	cmd := exec.Command(goBin, "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", bin, "./testdata/version")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// run runs bin with args and returns its output, trimmed.
func run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// A binary stamped with -ldflags -X, as make release stamps gojob (built
// with -buildvcs=false), reports the stamp, never "devel".
func TestStampedBinaryPrintsItsVersion(t *testing.T) {
	t.Parallel()
	const stamp = "v0.1.0-test.1"
	bin := buildStamped(t, "-s -w -X github.com/gojob/gojob/internal/buildinfo.version="+stamp)
	if got := run(t, bin); got != stamp {
		t.Errorf("a stamped build reports %q, want %q", got, stamp)
	}
}

// Without a stamp and without VCS information the binary says "devel".
func TestUnstampedBinaryIsDevel(t *testing.T) {
	t.Parallel()
	bin := buildStamped(t, "-s -w")
	if got := run(t, bin); got != "devel" {
		t.Errorf("an unstamped build reports %q, want devel", got)
	}
}

// `make build` and `make install` stamp the binary with git describe, as
// make release does: a developer's binary names its commit, not devel.
func TestMakeBuildAndInstallStampTheVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gojob binary twice")
	}
	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Skip("no make command")
	}
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git command")
	}
	describe, err := exec.Command(gitBin, "-C", "../..", "describe", "--tags", "--always", "--dirty").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	want := "gojob version " + strings.TrimSpace(string(describe)) + ","
	dir := t.TempDir()

	build := exec.Command(makeBin, "-C", "../..", "build", "BIN="+filepath.Join(dir, "built", "gojob"))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	install := exec.Command(makeBin, "-C", "../..", "install")
	install.Env = append(os.Environ(), "GOBIN="+filepath.Join(dir, "installed"))
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	for _, bin := range []string{filepath.Join(dir, "built", "gojob"), filepath.Join(dir, "installed", "gojob")} {
		out := run(t, bin, "--version")
		if !strings.HasPrefix(out, want) {
			t.Errorf("%s --version printed %q, want it to start with %q", bin, out, want)
		}
	}
}
