package durable_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/durable"
)

// A database named twice, in any spelling, is one store: a --db flag and
// DATABASE_URL naming the same database do not make every row looked up,
// reconciled and migrated twice.
func TestOneDatabaseNamedTwiceIsOneStore(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	d, err := durable.New(&durable.Config{URLs: []string{
		"postgres://app@127.0.0.1:5432/app",
		"postgresql://app:secret@127.0.0.1/app",
		"host=127.0.0.1 port=5432 user=app dbname=app",
		"postgres://app@127.0.0.1:5432/other",
		"postgres://app@127.0.0.2:5432/app",
		"sqlite:jobs.db",
		"sqlite:" + filepath.Join(dir, "jobs.db"),
		"sqlite:./jobs.db?_busy_timeout=100",
	}})
	require.NoError(t, err)
	defer d.Close()
	require.Len(t, d.Databases(), 4, "%v", d.Databases())
}
