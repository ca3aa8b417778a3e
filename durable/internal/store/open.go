package store

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Open opens the database of a URL lazily: postgres:// (or postgresql://,
// or a libpq key=value string) or sqlite:PATH (see SQLitePath). Nothing is
// dialed until the first statement, so an unreachable database is only
// skipped at use.
func Open(url string, o Options) (Store, error) {
	if _, _, ok := SQLitePath(url); ok {
		return openSQLite(url, o)
	}
	return openPostgres(url, o)
}

// DatabaseKey names the database a URL opens, so two spellings of one
// database (a --db flag and DATABASE_URL, postgres:// and postgresql://, a
// URL and a libpq key=value string, a relative and an absolute SQLite
// path) compare equal: "sqlite:" and the absolute path, or "postgres:"
// with the user, hosts, ports and database name as pgx reads them. A URL
// that does not parse is its own key.
func DatabaseKey(url string) string {
	url = strings.TrimSpace(url)
	if path, _, ok := SQLitePath(url); ok {
		if path != ":memory:" {
			if abs, err := filepath.Abs(path); err == nil {
				path = abs
			}
		}
		return "sqlite:" + path
	}
	cc, err := pgconn.ParseConfig(url)
	if err != nil {
		return url
	}
	hosts := []string{fmt.Sprintf("%s:%d", cc.Host, cc.Port)}
	for _, f := range cc.Fallbacks {
		hosts = append(hosts, fmt.Sprintf("%s:%d", f.Host, f.Port))
	}
	return "postgres:" + cc.User + "@" + strings.Join(hosts, ",") + "/" + cc.Database
}
