// Package pgtest gives a test binary PostgreSQL databases of its own on
// the server of TEST_DATABASE_URL (default: local trust auth as user
// postgres), dropped when the binary ends. Tests that need PostgreSQL fail
// when the server cannot be reached; they do not skip.
package pgtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gojob/gojob/internal/redact"
)

const defaultServerURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// ServerURL is the server the databases are created on.
func ServerURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return defaultServerURL
}

// Create makes n databases named <prefix>_<pid>_<random>_<i> and returns
// their URLs and the function that drops them (call it from TestMain after
// m.Run). err says why they could not be made; the tests that need them
// report it.
func Create(prefix string, n int) (urls []string, drop func(), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	server := ServerURL()
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		return nil, func() {}, fmt.Errorf("cannot reach PostgreSQL at %s (set TEST_DATABASE_URL; `make test` installs and starts a local server): %w", redact.URL(server), err)
	}
	defer admin.Close(ctx)
	base := fmt.Sprintf("%s_%d_%06d", prefix, os.Getpid(), rand.IntN(1_000_000))
	var made []string
	drop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, server)
		if err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: cannot drop the test databases:", err)
			return
		}
		defer admin.Close(ctx)
		for _, name := range made {
			if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
				fmt.Fprintln(os.Stderr, "pgtest: drop", name+":", err)
			}
		}
	}
	for i := range n {
		name := fmt.Sprintf("%s_%d", base, i+1)
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return nil, drop, fmt.Errorf("cannot create test database %s on %s: %w", name, redact.URL(server), err)
		}
		made = append(made, name)
		u, _ := url.Parse(server)
		u.Path = "/" + name
		urls = append(urls, u.String())
	}
	return urls, drop, nil
}
