package sqlite

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/storetest"
)

// raw gives the contract suite access to the tables (storetest.Raw).
type raw struct{ *Store }

var _ storetest.Raw = raw{}

func (r raw) RowCounts(ctx context.Context, tenantID string) (map[string]int, error) {
	return storetest.CountRows(ctx, tenantID, func(ctx context.Context, query, tenantID string) (n int, err error) {
		err = r.w.QueryRowContext(ctx, query, tenantID).Scan(&n)
		return n, err
	})
}

func (r raw) Dump(ctx context.Context) (string, error) {
	var tables []string
	rows, err := r.w.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`)
	if err != nil {
		return "", err
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return "", err
		}
		tables = append(tables, name)
	}
	rows.Close()
	var b strings.Builder
	for _, table := range tables {
		fmt.Fprintf(&b, "== %s\n", table)
		rows, err := r.w.QueryContext(ctx, `SELECT * FROM "`+table+`"`)
		if err != nil {
			return "", err
		}
		cols, _ := rows.Columns()
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				rows.Close()
				return "", err
			}
			for _, v := range vals {
				if bs, ok := v.([]byte); ok {
					fmt.Fprintf(&b, "%s|", hex.EncodeToString(bs))
				} else {
					fmt.Fprintf(&b, "%v|", v)
				}
			}
			b.WriteByte('\n')
		}
		if err := rows.Close(); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

func (r raw) ColumnTypes(ctx context.Context, table string) (map[string]string, error) {
	rows, err := r.w.QueryContext(ctx, `SELECT name, type FROM pragma_table_info(?)`, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return storetest.ColumnsOf(rows)
}

func (r raw) Corrupt(ctx context.Context, tenantID string, kind storetest.Corruption) error {
	const (
		res  = `INSERT INTO resources VALUES (?, ?, ?, ?, ?, 1, 0, 0, 0, 0, 0, 0, 0, 0, '', 0, 0)`
		cell = `INSERT INTO cells VALUES (?, ?, ?, 1, ?, 0, 0, 0, 0, 0)`
	)
	var err error
	switch kind {
	case storetest.CorruptCapacity:
		_, err = r.w.ExecContext(ctx, res, tenantID, storetest.CorruptID, 0, "{}", 1.0)
	case storetest.CorruptAlpha:
		// SQLite stores NaN as NULL, which NOT NULL rejects; 9e999 is +Inf.
		_, err = r.w.ExecContext(ctx, `INSERT INTO resources VALUES (?, ?, 1, '{}', 9e999, 1, 0, 0, 0, 0, 0, 0, 0, 0, '', 0, 0)`, tenantID, storetest.CorruptID)
	case storetest.CorruptBeta:
		_, err = r.w.ExecContext(ctx, `INSERT INTO cells SELECT pool_id, id, ?, 1, -1, 0, 0, 0, 0, 0 FROM resources WHERE pool_id = ? ORDER BY id LIMIT 1`,
			storetest.CorruptID, tenantID)
	case storetest.CorruptOrphan:
		_, err = r.w.ExecContext(ctx, cell, tenantID, storetest.CorruptID, "ctx", 1.0)
	case storetest.CorruptLabels:
		_, err = r.w.ExecContext(ctx, res, tenantID, storetest.CorruptID, 1, "{not json", 1.0)
	case storetest.CorruptEmptyID:
		_, err = r.w.ExecContext(ctx, res, tenantID, "", 1, "{}", 1.0)
	case storetest.CorruptLongID:
		_, err = r.w.ExecContext(ctx, res, tenantID, storetest.LongID(), 1, "{}", 1.0)
	default:
		err = fmt.Errorf("unknown corruption %q", kind)
	}
	return err
}

func openTest(t *testing.T, path string, opts store.Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), path, opts)
	if err != nil {
		t.Fatalf("Open(ctx, %q) = got error %v, want nil", path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close() = got error %v, want nil", err)
		}
	})
	return s
}

func TestContract(t *testing.T) {
	tests := []struct {
		name string
		path func(t *testing.T) string
		// claim takes the writer claim, as a server does: the lease
		// journal is then written to the lease log.
		claim bool
	}{
		{name: "file", path: func(t *testing.T) string { return filepath.Join(t.TempDir(), "repool.db") }},
		{name: "file claimed", path: func(t *testing.T) string { return filepath.Join(t.TempDir(), "repool.db") }, claim: true},
		{name: "memory", path: func(*testing.T) string { return Memory }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, opts store.Options) store.Store {
				s := openTest(t, tc.path(t), opts)
				if tc.claim {
					c, err := s.LockWriter(t.Context())
					if err != nil {
						t.Fatalf("LockWriter = got error %v, want nil", err)
					}
					t.Cleanup(c.Release)
				}
				return raw{s}
			})
		})
	}
}

func TestOpenErrors(t *testing.T) {
	tests := []struct {
		name    string
		path    string
		wantErr error
	}{
		{name: "empty path", path: "", wantErr: store.ErrInvalid},
		{name: "query in path", path: "/tmp/x.db?mode=ro", wantErr: store.ErrInvalid},
		{name: "missing directory", path: "/nonexistent/dir/repool.db", wantErr: store.ErrUnavailable},
		{name: "directory as file", path: t.TempDir(), wantErr: store.ErrUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(t.Context(), tc.path, store.Options{})
			if err == nil {
				s.Close()
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Open(ctx, %q) = got error %v, want %v", tc.path, err, tc.wantErr)
			}
		})
	}
}

// TestReopen checks that data and migrations survive a restart.
func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "repool.db")
	s, err := Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatalf("Open(ctx, %q) = got error %v, want nil", path, err)
	}
	if _, err := s.CreateTenant(t.Context(), store.Tenant{ID: "acme"}); err != nil {
		t.Fatalf("CreateTenant(ctx, acme) = got error %v, want nil", err)
	}
	key, err := s.SigningKey(t.Context())
	if err != nil {
		t.Fatalf("SigningKey(ctx) = got error %v, want nil", err)
	}
	epoch, err := s.BumpEpoch(t.Context())
	if err != nil {
		t.Fatalf("BumpEpoch(ctx) = got error %v, want nil", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = got error %v, want nil", err)
	}

	s = openTest(t, path, store.Options{})
	if _, err := s.GetTenant(t.Context(), "acme"); err != nil {
		t.Fatalf("GetTenant(ctx, acme) after reopen = got error %v, want nil", err)
	}
	if again, err := s.SigningKey(t.Context()); err != nil || string(again) != string(key) {
		t.Fatalf("SigningKey(ctx) after reopen = got %x, %v, want %x, nil", again, err, key)
	}
	if next, err := s.BumpEpoch(t.Context()); err != nil || next <= epoch {
		t.Fatalf("BumpEpoch(ctx) after reopen = got %d, %v, want > %d", next, err, epoch)
	}
}

// TestTwoProcesses opens one file twice, as a server and a CLI would, and
// races writers on both handles: the busy timeout serializes them.
func TestTwoProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "repool.db")
	a, b := openTest(t, path, store.Options{}), openTest(t, path, store.Options{})
	var wg sync.WaitGroup
	keys := make([][]byte, 2)
	epochs := make([][]uint32, 2)
	errs := make([]error, 2)
	for i, s := range []*Store{a, b} {
		wg.Go(func() {
			keys[i], errs[i] = s.SigningKey(t.Context())
			for range 20 {
				if errs[i] != nil {
					return
				}
				var e uint32
				e, errs[i] = s.BumpEpoch(t.Context())
				epochs[i] = append(epochs[i], e)
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("handle %d: SigningKey/BumpEpoch = got error %v, want nil", i, err)
		}
	}
	if string(keys[0]) != string(keys[1]) {
		t.Fatalf("SigningKey(ctx) on two handles = got %x and %x, want one key", keys[0], keys[1])
	}
	seen := make(map[uint32]bool)
	for i, es := range epochs {
		for j, e := range es {
			if seen[e] || (j > 0 && e <= es[j-1]) {
				t.Fatalf("BumpEpoch(ctx) on handle %d = got %v, want strictly increasing values unique across handles", i, es)
			}
			seen[e] = true
		}
	}
}

// TestClosedIsUnavailable checks that a call on a closed store is reported
// as unavailable, not as a missing row.
func TestClosedIsUnavailable(t *testing.T) {
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "repool.db"), store.Options{})
	if err != nil {
		t.Fatalf("Open(ctx) = got error %v, want nil", err)
	}
	s.Close()
	_, _, err = s.LookupKey(t.Context(), make([]byte, store.DigestLen))
	if !errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrNotFound) {
		t.Fatalf("LookupKey(ctx) on a closed store = got error %v, want ErrUnavailable only", err)
	}
}

func benchStore(b *testing.B) store.Store {
	b.Helper()
	s, err := Open(b.Context(), filepath.Join(b.TempDir(), "bench.db"), store.Options{})
	if err != nil {
		b.Fatalf("Open(ctx) = got error %v, want nil", err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func BenchmarkCheckpointFull500k(b *testing.B) {
	storetest.BenchmarkFull(b, benchStore(b), 100_000, 5)
}

func BenchmarkCheckpointIncremental1pct(b *testing.B) {
	storetest.BenchmarkIncremental(b, benchStore(b), 100_000, 5, 100)
}

func BenchmarkLoadCheckpoint500k(b *testing.B) {
	storetest.BenchmarkLoad(b, benchStore(b), 100_000, 5)
}

// TestGroupsNeedPostgres: a SQLite store serves the default group only; a
// handle for another group is refused, and so is a move.
func TestGroupsNeedPostgres(t *testing.T) {
	if _, err := Open(t.Context(), filepath.Join(t.TempDir(), "g.db"), store.Options{Group: "b"}); !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "PostgreSQL") {
		t.Fatalf("Open(group b) = got %v, want ErrInvalid naming PostgreSQL", err)
	}
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "d.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateTenant(t.Context(), store.Tenant{ID: "acme", Name: "Acme"}); err != nil {
		t.Fatal(err)
	}
	if err := s.MoveTenant(t.Context(), "acme", "b"); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("MoveTenant on SQLite = got %v, want ErrInvalid", err)
	}
	if tn, err := s.GetTenant(t.Context(), "acme"); err != nil || tn.Group != store.DefaultGroup {
		t.Fatalf("GetTenant after a refused move = got %+v, %v, want the default group", tn, err)
	}
}
