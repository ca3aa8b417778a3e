// Package rubyfixtures reads the wire fixtures of testdata/ruby-fixtures
// (see its README) from any package's tests: a fixture's bytes and its
// manifest entry.
package rubyfixtures

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Entry is one manifest entry.
type Entry struct {
	File       string `json:"file"`
	Kind       string `json:"kind"`
	ProducedBy string `json:"produced_by"`
	Redis      struct {
		Key   string `json:"key"`
		Type  string `json:"type"`
		Field string `json:"field"`
		Score string `json:"score"`
	} `json:"redis"`
}

// Dir returns testdata/ruby-fixtures/<version>, found from the test's
// working directory up to the module root.
func Dir(t testing.TB, version string) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "testdata", "ruby-fixtures", version)
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod above the test")
		dir = parent
	}
}

// Read returns the bytes of a fixture file (or of capture/<name>).
func Read(t testing.TB, version, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Dir(t, version), file))
	require.NoError(t, err)
	return b
}

// Find returns the manifest entry of file.
func Find(t testing.TB, version, file string) Entry {
	t.Helper()
	var m struct {
		Fixtures []Entry `json:"fixtures"`
	}
	require.NoError(t, json.Unmarshal(Read(t, version, "manifest.json"), &m))
	for _, e := range m.Fixtures {
		if e.File == file {
			return e
		}
	}
	t.Fatalf("%s/%s is not in the manifest", version, file)
	return Entry{}
}

// Pairs reads a fixture that holds HGETALL as [field, value] pairs.
func Pairs(t testing.TB, version, file string) [][2]string {
	t.Helper()
	var p [][2]string
	require.NoError(t, json.Unmarshal(Read(t, version, file), &p))
	return p
}
