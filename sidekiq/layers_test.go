package sidekiq_test

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"
)

// The packages under sidekiq/ form layers, and a package imports only
// packages of lower layers (docs: README "Layout"). A new package must be
// given its layer here.
var layers = map[string]int{
	"sidekiq/rubyjson":             0,
	"sidekiq/internal/redisx":      0,
	"sidekiq/internal/sentinel":    0,
	"sidekiq/wire":                 1,
	"sidekiq/internal/fetch":       2,
	"sidekiq/internal/maintenance": 2,
	"sidekiq":                      3,
	"sidekiq/activejob":            4,
	"sidekiq/api":                  4,
}

func TestPackagesImportOnlyLowerLayers(t *testing.T) {
	const module = "github.com/gojob/gojob/"
	for pkg, layer := range layers {
		dir := "."
		if pkg != "sidekiq" {
			dir = filepath.Join(".", strings.TrimPrefix(pkg, "sidekiq/"))
		}
		bp, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("%s: %v", pkg, err)
		}
		for _, imp := range bp.Imports {
			rel, ok := strings.CutPrefix(imp, module)
			if !ok || !strings.HasPrefix(rel, "sidekiq") {
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
