package sqlite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/repool/repool/internal/store"
)

// epochMarkSuffix names the epoch mark of a file store: the database's
// path with this suffix. It holds, as a decimal number and a newline, the
// highest epoch BumpEpoch has handed out on this path.
//
// Fencing tokens and lease ids carry the epoch in their upper bits and
// every start raises it, so tokens keep increasing across restarts as long
// as the epoch does. The epoch lives in the database; a database copied
// back from an older state (a backup restored, a file copied over) has an
// older one, and the next start would raise it to an epoch that was already
// used and hand out tokens below ones already handed out, while the leases
// those carry are forgotten by the older copy. The mark is kept outside
// the database, so that copying the database back does not take it back:
// BumpEpoch raises the store's epoch above the mark first, and records the
// new epoch in the mark (written to a new file, fsynced, renamed over the
// old one, the directory fsynced) before it returns it, so before any token
// of that epoch exists. A crash between the two leaves the mark one epoch
// behind the database, an epoch no token carries.
//
// It guards against the database going back, not against everything:
// restoring the mark with it (a copy of the whole directory), deleting it,
// or moving the database to a new directory without it takes the guard
// away (the store then goes on from the database's own epoch, as it did
// before the mark existed). docs/server.md says how to restore a copy.
const epochMarkSuffix = "-epoch"

// readEpochMark returns the epoch of the mark at path, 0 if there is none.
func readEpochMark(path string) (uint32, error) {
	f, err := openNoFollow(path, os.O_RDONLY, "epoch mark")
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64))
	if err != nil {
		return 0, fmt.Errorf("%w: reading the epoch mark %s: %v", store.ErrUnavailable, path, err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%w: the epoch mark %s holds %q, not an epoch: write into it, as a decimal number, an epoch at least as high "+
			"as any this store's servers used (the \"epoch\" of their \"server active\" log lines, or any fencing token they handed out divided by 2^40)",
			store.ErrCorrupt, path, b)
	}
	return uint32(v), nil
}

// writeEpochMark replaces the mark at path with epoch, durably: a new
// file, fsynced, renamed over the old one, then the directory fsynced.
func writeEpochMark(path string, epoch uint32) error {
	tmp := path + ".tmp"
	fail := func(err error) error {
		return fmt.Errorf("%w: recording epoch %d in the epoch mark %s: %v", store.ErrUnavailable, epoch, path, err)
	}
	f, err := openNoFollow(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, "epoch mark")
	if err != nil {
		return err
	}
	_, err = f.WriteString(strconv.FormatUint(uint64(epoch), 10) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fail(err)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fail(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fail(err)
	}
	return nil
}

// BumpEpoch implements store.Store: sqlstore's, with the epoch mark of a
// file store (epochMarkSuffix) kept beside it, so that the epoch it returns
// is above every epoch handed out on this path, even after the database was
// copied back from an older state.
func (s *Store) BumpEpoch(ctx context.Context) (uint32, error) {
	if s.path == "" || s.opts.ReadOnly {
		return s.Store.BumpEpoch(ctx)
	}
	// The store's directory is flocked while the mark is read, the epoch
	// raised and the mark written: BumpEpoch of another handle or process
	// on this store waits, so the mark never goes back.
	dir, err := os.Open(filepath.Dir(s.path))
	if err != nil {
		return 0, fmt.Errorf("bump epoch: %w: %v", store.ErrUnavailable, err)
	}
	defer dir.Close() // drops the flock
	if err := syscall.Flock(int(dir.Fd()), syscall.LOCK_EX); err != nil {
		return 0, fmt.Errorf("bump epoch: %w: locking the store's directory: %v", store.ErrUnavailable, err)
	}
	markPath := s.path + epochMarkSuffix
	mark, err := readEpochMark(markPath)
	if err != nil {
		return 0, fmt.Errorf("bump epoch: %w", err)
	}
	if mark > 0 {
		// The sequence BumpEpoch takes the next epoch from goes on from
		// the mark if the database's own counters are behind it.
		_, err := s.w.ExecContext(ctx, `
INSERT INTO server_counters (name, value)
SELECT 'epoch_seq', max(?, coalesce(max(value), 0)) FROM server_counters WHERE name = 'epoch' OR name LIKE 'epoch:%' OR name = 'epoch_seq'
ON CONFLICT (name) DO UPDATE SET value = max(value, excluded.value)`, int64(mark))
		if err != nil {
			return 0, fmt.Errorf("bump epoch: raising the epoch to the epoch mark %s (%d): %w", markPath, mark, classify(err))
		}
	}
	epoch, err := s.Store.BumpEpoch(ctx)
	if err != nil {
		return 0, err
	}
	if epoch <= mark {
		return 0, fmt.Errorf("bump epoch: %w: the store's epoch %d is not above the epoch mark %s (%d)", store.ErrConflict, epoch, markPath, mark)
	}
	if err := writeEpochMark(markPath, epoch); err != nil {
		return 0, fmt.Errorf("bump epoch: %w", err)
	}
	return epoch, nil
}
