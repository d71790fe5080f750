package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"slices"
	"sync"
	"syscall"

	"github.com/repool/repool/internal/store"
)

// leaseLogSuffix names a file store's lease log: the database's path with
// this suffix, beside SQLite's own -wal and -shm files.
const leaseLogSuffix = "-leases"

// leaseLog is the tail of a file store's lease journal. WriteLeases appends
// one checksummed record per call to PATH-leases with one write(2) — no
// SQLite transaction, whose fixed cost (pages to the WAL, locks on the
// shared memory) is what a busy server's lease changes would otherwise pay
// per group commit — and a fold moves what the log holds into the
// lease_journal table and empties the log: at every open, at every
// compaction (PruneLeases) and before a tenant is deleted.
//
// A record is durable against a crash of the process once write(2)
// returns (the kernel holds it), and against a power loss once fsync
// returns, with store.Options Fsync, as SQLite's synchronous=NORMAL and
// FULL are. Replay is the table, then the log's records in order; a fold
// that commits and crashes before it empties the log is replayed again,
// which changes nothing: the last change of each lease wins either way.
//
// The log is private to the store's writer: it is held with an exclusive
// flock for the store's life, and every append checks that the file
// appended to still has a name, so that a writer whose log was removed or
// replaced under it fails its writes instead of acknowledging them into a
// file that no one will read. All methods are safe for concurrent use.
type leaseLog struct {
	path  string
	fsync bool

	mu   sync.Mutex
	f    *os.File
	fd   int // f's descriptor, for fstat
	id   fileID
	size int64 // bytes of whole records in the file
	// err, once set, fails every later append: the file's tail is not
	// known to be whole, or it is not the log any more.
	err error
	// pending holds the net change of each lease since the last fold: the
	// row, or nil for the removal of a folded row.
	pending map[leaseKey]*store.LeaseRow
	// folded holds the expiry of each row of the lease_journal table, to
	// tell which removals the next fold must write.
	folded map[leaseKey]int64
	buf    []byte
}

type leaseKey struct {
	tenant string
	id     uint64
}

// CorruptLogError is a lease log damaged in a way no crash leaves: a
// record that does not hold, with an intact record after it. Opening the
// log stops there and changes nothing in the file; the records from Offset
// on are not replayed. It wraps store.ErrCorrupt.
type CorruptLogError struct {
	Path   string
	Offset int64  // where the first damaged record starts
	Next   int64  // where the first intact record after it starts
	Size   int64  // the file's size
	Why    string // what is wrong with the record at Offset
}

func (e *CorruptLogError) Error() string {
	return fmt.Sprintf("lease log %s is damaged at byte offset %d (%s), and an intact record follows at offset %d of %d bytes: "+
		"this is not a torn tail a crash leaves, so nothing was cut and the file is unchanged; "+
		"the leases journaled from offset %d on would be forgotten. Stop here and repair (docs/server.md, \"A damaged lease log\"): "+
		"move the file aside (mv %s %s.damaged), never truncate it in place",
		e.Path, e.Offset, e.Why, e.Next, e.Size, e.Offset, e.Path, e.Path)
}

func (e *CorruptLogError) Unwrap() error { return store.ErrCorrupt }

// checkDamage returns a *CorruptLogError for damage that intact records
// follow, nil for none or a torn tail.
func checkDamage(path string, size int, d *logDamage) error {
	if d == nil || d.torn() {
		return nil
	}
	return &CorruptLogError{Path: path, Offset: int64(d.off), Next: int64(d.next), Size: int64(size), Why: d.why}
}

// openLeaseLog opens (creating, mode 0600) and locks the lease log at
// path and returns it with the records it holds. The path's last element
// must not be a symbolic link (O_NOFOLLOW): the log is truncated, and
// must not reach a file elsewhere. A torn tail, the record a crash cut
// short (no intact record after it), is cut off and logged: it was never
// acknowledged. A damaged record that intact records follow is not a torn
// tail: openLeaseLog returns a *CorruptLogError and leaves the file as it
// is.
func openLeaseLog(path string, fsync bool, log *slog.Logger) (*leaseLog, []leaseRecord, error) {
	f, err := openNoFollow(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, "lease log")
	if err != nil {
		return nil, nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil, fmt.Errorf("%w: the lease log %s is held by another process writing this store; stop it, or give this one its own --store", store.ErrLocked, path)
		}
		return nil, nil, fmt.Errorf("%w: locking the lease log %s: %v", store.ErrUnavailable, path, err)
	}
	l := &leaseLog{path: path, fsync: fsync, f: f, pending: map[leaseKey]*store.LeaseRow{}, folded: map[leaseKey]int64{}}
	fail := func(err error) (*leaseLog, []leaseRecord, error) {
		f.Close()
		return nil, nil, fmt.Errorf("%w: lease log %s: %v", store.ErrUnavailable, path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%w: the lease log %s is not a regular file", store.ErrUnavailable, path)
	}
	l.id = sysID(fi)
	l.fd = int(f.Fd())
	b, err := io.ReadAll(io.NewSectionReader(f, 0, fi.Size()))
	if err != nil {
		return fail(err)
	}
	recs, n, damage := scanLog(b)
	if err := checkDamage(path, len(b), damage); err != nil {
		f.Close()
		return nil, nil, err
	}
	if damage != nil {
		// Logged before the cut, with what is cut: the evidence of a
		// torn tail is its offset and length.
		log.Warn("lease log: cutting a torn tail (the last record, cut short or left garbled by a crash; no intact record follows it)",
			"path", path, "offset", n, "bytes", len(b)-n, "why", damage.why)
		if err := f.Truncate(int64(n)); err != nil {
			return fail(err)
		}
	}
	l.size = int64(n)
	return l, recs, nil
}

// readLeaseLog returns the whole records of the lease log at path without
// locking or changing it (none if there is no log), for a read-only store.
// A torn tail is skipped (a running writer may be appending it); damage
// that intact records follow is a *CorruptLogError.
func readLeaseLog(path string) ([]leaseRecord, error) {
	f, err := openNoFollow(path, os.O_RDONLY, "lease log")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var last []byte
	for attempt := 1; ; attempt++ {
		b, err := io.ReadAll(io.NewSectionReader(f, 0, math.MaxInt64))
		if err != nil {
			return nil, fmt.Errorf("%w: reading the lease log: %v", store.ErrUnavailable, err)
		}
		recs, _, damage := scanLog(b)
		err = checkDamage(path, len(b), damage)
		if err == nil {
			return recs, nil
		}
		// A running writer that empties the log (a fold) while this
		// reads it can show a mix of the old and the new bytes: damage is
		// reported once two reads agree (or after a few that never do).
		if bytes.Equal(b, last) || attempt == 5 {
			return nil, err
		}
		last = b
	}
}

// note applies one record to the pending changes. Call with mu held.
func (l *leaseLog) note(r leaseRecord) {
	for _, id := range r.del {
		k := leaseKey{r.tenant, id}
		if _, ok := l.folded[k]; ok {
			l.pending[k] = nil
		} else {
			delete(l.pending, k)
		}
	}
	for i := range r.put {
		row := r.put[i]
		l.pending[leaseKey{r.tenant, row.ID}] = &row
	}
}

// append makes one WriteLeases call durable. Removals are applied before
// puts, as the table's transaction does.
func (l *leaseLog) append(tenant string, put []store.LeaseRow, del []uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	l.buf = appendRecord(l.buf[:0], tenant, put, del)
	if _, err := l.f.Write(l.buf); err != nil {
		// A partial record would hide every later one from replay.
		if terr := l.f.Truncate(l.size); terr != nil {
			l.err = fmt.Errorf("%w: lease log %s: a failed append could not be cut off: %v", store.ErrUnavailable, l.path, terr)
		}
		return fmt.Errorf("%w: appending to the lease log: %w", store.ErrUnavailable, err)
	}
	l.size += int64(len(l.buf))
	if l.fsync {
		if err := l.f.Sync(); err != nil {
			// After a failed fsync the kernel may have dropped the pages:
			// nothing written since the last good one is known durable.
			l.err = fmt.Errorf("%w: syncing the lease log %s: %v", store.ErrUnavailable, l.path, err)
			return l.err
		}
	}
	// Checked after the write: a log removed or replaced (renamed over)
	// before this point has no name left, and the write, into a file no
	// one will read, is refused. fstat costs no path lookup; the claim's
	// Check compares the path's file every second as well.
	var st syscall.Stat_t
	if err := syscall.Fstat(l.fd, &st); err != nil || st.Nlink == 0 {
		l.err = fmt.Errorf("%w: the lease log %s was removed or replaced under this server", store.ErrFenced, l.path)
		return l.err
	}
	l.note(leaseRecord{tenant: tenant, put: put, del: del})
	return nil
}

// fold writes the pending changes into the lease_journal table in one
// transaction of s, runs then (if not nil) in that transaction, and once it
// has committed empties the log. It takes the log once the transaction
// holds the store's writer connection, so appends wait only for the fold's
// own writes, never for another transaction on that connection.
func (l *leaseLog) fold(ctx context.Context, s *Store, then func(tx *sql.Tx) error) error {
	locked := false
	defer func() {
		if locked {
			l.mu.Unlock()
		}
	}()
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		l.mu.Lock()
		locked = true
		if l.err != nil {
			return l.err
		}
		put := map[string][]store.LeaseRow{}
		del := map[string][]uint64{}
		for k, row := range l.pending {
			if row != nil {
				put[k.tenant] = append(put[k.tenant], *row)
			} else {
				del[k.tenant] = append(del[k.tenant], k.id)
			}
		}
		sctx := context.WithoutCancel(ctx)
		if err := s.checkFence(sctx, tx); err != nil {
			return err
		}
		for tenant, ids := range del {
			if err := s.writeRows(sctx, tx, tenant, nil, ids); err != nil {
				return err
			}
		}
		for tenant, rows := range put {
			if err := s.writeRows(sctx, tx, tenant, rows, nil); err != nil {
				return err
			}
		}
		if then != nil {
			return then(tx)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for k, row := range l.pending {
		if row != nil {
			l.folded[k] = row.ExpiresAt
		} else {
			delete(l.folded, k)
		}
	}
	clear(l.pending)
	if err := l.f.Truncate(0); err != nil {
		// The table holds every record: replaying them again is harmless,
		// but appends after a tail of unknown length are not.
		l.err = fmt.Errorf("%w: emptying the lease log %s: %v", store.ErrUnavailable, l.path, err)
		return l.err
	}
	l.size = 0
	return nil
}

// forget drops what the log knows of tenant's leases, after the tenant's
// rows were deleted. Its records stay in the file until the next fold;
// replayed after a crash, they name a deleted tenant, whose leases no one
// loads, and expire.
func (l *leaseLog) forget(tenant string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.pending {
		if k.tenant == tenant {
			delete(l.pending, k)
		}
	}
	for k := range l.folded {
		if k.tenant == tenant {
			delete(l.folded, k)
		}
	}
}

// pruned drops the folded rows that expired before before, as the
// compaction that just committed deleted them.
func (l *leaseLog) pruned(before int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, exp := range l.folded {
		if exp < before {
			delete(l.folded, k)
		}
	}
}

// close releases the log's lock.
func (l *leaseLog) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.err = fmt.Errorf("%w: the store is closed", store.ErrUnavailable)
	return l.f.Close()
}

// overlay applies the changes of recs (in order) to tenant's rows from the
// table, and returns them ordered by lease id.
func overlay(tenant string, rows []store.LeaseRow, apply func(func(leaseRecord))) []store.LeaseRow {
	byID := make(map[uint64]store.LeaseRow, len(rows))
	for _, r := range rows {
		byID[r.ID] = r
	}
	apply(func(r leaseRecord) {
		if r.tenant != tenant {
			return
		}
		for _, id := range r.del {
			delete(byID, id)
		}
		for _, p := range r.put {
			byID[p.ID] = p
		}
	})
	out := make([]store.LeaseRow, 0, len(byID))
	for _, r := range byID {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b store.LeaseRow) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}
