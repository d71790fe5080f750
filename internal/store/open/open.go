// Package open opens the store.Store that a URL names, so that mains and
// tools take one --store flag:
//
//	sqlite:PATH            SQLite file (created if missing), e.g. sqlite:./data/repool.db
//	sqlite::memory:        private in-memory SQLite database (tests)
//	postgres://... or postgresql://...   PostgreSQL (pgx)
//
// Migrations are applied before the store is returned.
package open

import (
	"context"
	"fmt"
	"strings"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/postgres"
	"github.com/repool/repool/internal/store/sqlite"
)

// Store opens the store named by url with opts and applies its migrations.
// An empty url or an unknown scheme returns store.ErrInvalid; a database
// that cannot be reached returns store.ErrUnavailable. The caller closes
// the store. Errors never repeat a PostgreSQL url, which may hold a
// password.
func Store(ctx context.Context, url string, opts store.Options) (store.Store, error) {
	path, isSQLite := SQLitePath(url)
	switch {
	case isSQLite:
		s, err := sqlite.Open(ctx, path, opts)
		if err != nil {
			return nil, err
		}
		return s, nil
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		s, err := postgres.Open(ctx, url, opts)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	scheme, _, ok := strings.Cut(url, ":")
	if !ok {
		scheme = url
	}
	return nil, fmt.Errorf("%w: store url: unknown scheme %q, want sqlite:PATH, sqlite::memory: or postgres://...", store.ErrInvalid, scheme)
}

// SQLitePath returns the file (or sqlite.Memory) that a sqlite:PATH URL
// names, as Store opens it; the URL-ish spelling sqlite://PATH is
// tolerated too. ok is false for any other URL.
func SQLitePath(url string) (path string, ok bool) {
	path, ok = strings.CutPrefix(url, "sqlite:")
	if !ok {
		return "", false
	}
	if p, ok := strings.CutPrefix(path, "//"); ok {
		path = p
	}
	return path, true
}
