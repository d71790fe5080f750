// Package open owns the store URL (the --store flag): ParseURL reads it
// (kind, SQLite path, a redacted form for logs, session defaults for
// PostgreSQL), and Store opens the store.Store it names, so that mains and
// tools take one flag:
//
//	sqlite:PATH            SQLite file (created if missing), e.g. sqlite:./data/repool.db
//	sqlite::memory:        private in-memory SQLite database (tests)
//	postgres://... or postgresql://...   PostgreSQL (pgx)
//
// Migrations are applied before the store is returned.
package open

import (
	"context"

	"github.com/repool/repool/internal/store"
)

// Store opens the store named by url with opts and applies its migrations.
// An empty url or an unknown scheme returns store.ErrInvalid; a database
// that cannot be reached returns store.ErrUnavailable. The caller closes
// the store. Errors never repeat a PostgreSQL url, which may hold a
// password.
func Store(ctx context.Context, url string, opts store.Options) (store.Store, error) {
	u, err := ParseURL(url)
	if err != nil {
		return nil, err
	}
	return u.Open(ctx, opts)
}
