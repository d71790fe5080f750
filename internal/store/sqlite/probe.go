package sqlite

import (
	"context"
	"fmt"
	"os"

	"github.com/repool/repool/internal/store"
)

// probeSuffix names the scratch file ProbeWrite writes and removes beside
// the database.
const probeSuffix = "-probe"

// probeBytes is what the scratch file takes on the file system. SQLite
// writes into the pages of its WAL that a checkpoint freed, and the lease
// log into the free end of its last block, so on a full disk a small
// write of either can succeed while the next one that needs a new block
// fails: the scratch file asks for new blocks every time.
const probeBytes = 64 << 10

// ProbeWrite implements store.WriteProber: the shared counter row (one
// write to the database and its WAL) and, for a file store, a scratch
// file of probeBytes written beside the database (synced with
// store.Options Fsync) and removed. A full or read-only file system fails
// it with store.ErrUnavailable wrapping the system's error.
func (s *Store) ProbeWrite(ctx context.Context) error {
	if err := s.Store.ProbeWrite(ctx); err != nil {
		return err
	}
	if s.path == "" || s.opts.ReadOnly {
		return nil
	}
	p := s.path + probeSuffix
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fileMode)
	if err != nil {
		return fmt.Errorf("%w: probe write: %w", store.ErrUnavailable, err)
	}
	_, err = f.Write(make([]byte, probeBytes))
	if err == nil && s.opts.Fsync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if rerr := os.Remove(p); err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("%w: probe write: %w", store.ErrUnavailable, err)
	}
	return nil
}
