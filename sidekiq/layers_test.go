package sidekiq_test

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The packages under sidekiq/, with internal/contract, form layers, and a
// package imports only packages of lower layers (docs: README "Layout"). A
// new package must be given its layer here.
var layers = map[string]int{
	"sidekiq/internal/lazyjson":    0,
	"sidekiq/rubyjson":             1,
	"sidekiq/internal/redisx":      1,
	"sidekiq/internal/resp":        1,
	"sidekiq/internal/sentinel":    1,
	"sidekiq/wire":                 2,
	"internal/contract":            3,
	"sidekiq/internal/fetch":       4,
	"sidekiq/internal/maintenance": 4,
	"sidekiq":                      5,
	"sidekiq/activejob":            6,
	"sidekiq/api":                  6,
	"sidekiq/typed":                7,
	"sidekiq/sidekiqtest":          8,
}

func TestPackagesImportOnlyLowerLayers(t *testing.T) {
	const module = "github.com/gojob/gojob/"
	for pkg, layer := range layers {
		dir := "."
		switch {
		case !strings.HasPrefix(pkg, "sidekiq"):
			dir = filepath.Join("..", pkg)
		case pkg != "sidekiq":
			dir = filepath.Join(".", strings.TrimPrefix(pkg, "sidekiq/"))
		}
		bp, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("%s: %v", pkg, err)
		}
		for _, imp := range bp.Imports {
			rel, ok := strings.CutPrefix(imp, module)
			if _, layered := layers[rel]; !ok || (!layered && !strings.HasPrefix(rel, "sidekiq")) {
				continue
			}
			l, known := layers[rel]
			if !known {
				t.Errorf("%s imports %s, which has no layer in layers_test.go", pkg, rel)
				continue
			}
			if l >= layer {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports must go down", pkg, layer, rel, l)
			}
		}
	}
}

// Lua lives in lua/ files, embedded, never in Go strings: a script is
// read, diffed and tested as Lua (docs/sidekiq-wire.md names each).
func TestNoLuaInGoStrings(t *testing.T) {
	inline := regexp.MustCompile("NewScript\\([^,]+, *[`\"]|\"EVAL\", *[a-zA-Z`\"]")
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if inline.MatchString(line) {
				t.Errorf("%s:%d: Lua in a Go string; put it in a lua/ file: %s", path, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
