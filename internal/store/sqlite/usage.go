package sqlite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/repool/repool/internal/store"
)

// Usage implements store.Store: the size of the store's files (the
// database, its -wal and -shm files, the lease log, the lock file and the
// epoch mark; a file that does not exist counts 0), or, for Memory, the
// database's pages. SQLite reuses the pages of deleted rows (they go on
// the database's free list), so a store whose rows stop growing stops
// growing on disk at the largest size it reached; it never shrinks
// without a VACUUM.
func (s *Store) Usage(ctx context.Context) (store.Usage, error) {
	var u store.Usage
	if s.path == "" && s.logPath == "" {
		var pages, size int64
		if err := s.r.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&pages); err != nil {
			return store.Usage{}, fmt.Errorf("store usage: %w", classify(err))
		}
		if err := s.r.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&size); err != nil {
			return store.Usage{}, fmt.Errorf("store usage: %w", classify(err))
		}
		u.Bytes = pages * size
	} else {
		path := s.path
		if path == "" { // read-only: logPath is the absolute database path plus the suffix
			path = s.logPath[:len(s.logPath)-len(leaseLogSuffix)]
		}
		for _, p := range storeFiles(path) {
			fi, err := os.Lstat(p)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return store.Usage{}, fmt.Errorf("store usage: %w: %v", store.ErrUnavailable, err)
			}
			u.Bytes += fi.Size()
		}
	}
	var err error
	if u.AuditRows, err = s.AuditRows(ctx); err != nil {
		return store.Usage{}, fmt.Errorf("store usage: %w", err)
	}
	return u, nil
}
