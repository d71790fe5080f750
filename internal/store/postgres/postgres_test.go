package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/storetest"
	"github.com/repool/repool/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// raw gives the contract suite access to the tables (storetest.Raw).
type raw struct{ *Store }

var _ storetest.Raw = raw{}

func (r raw) RowCounts(ctx context.Context, tenantID string) (map[string]int, error) {
	return storetest.CountRows(ctx, tenantID, func(ctx context.Context, query, tenantID string) (n int, err error) {
		err = r.pool.QueryRow(ctx, query, tenantID).Scan(&n)
		return n, err
	})
}

func (r raw) Dump(ctx context.Context) (string, error) {
	rows, err := r.pool.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename`)
	if err != nil {
		return "", err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, table := range tables {
		fmt.Fprintf(&b, "== %s\n", table)
		rows, err := r.pool.Query(ctx, fmt.Sprintf(`SELECT t::text FROM %s t`, pgx.Identifier{table}.Sanitize()))
		if err != nil {
			return "", err
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return "", err
		}
		for _, l := range lines {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String(), nil
}

func (r raw) ColumnTypes(ctx context.Context, table string) (map[string]string, error) {
	rows, err := r.pool.Query(ctx, `SELECT column_name, data_type FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name = $1`, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return storetest.ColumnsOf(rows)
}

func (r raw) Corrupt(ctx context.Context, tenantID string, kind storetest.Corruption) error {
	// Bad rows go into the tenant's current generation, where
	// LoadCheckpoint reads.
	const (
		gen  = `(SELECT gen FROM checkpoint_meta WHERE pool_id = $1)`
		res  = `INSERT INTO resources VALUES ($1, ` + gen + `, $2, $3, $4, $5, 1, 0, 0, 0, 0, 0, 0, 0, 0, '', false, 0)`
		cell = `INSERT INTO cells VALUES ($1, ` + gen + `, $2, $3, 1, $4, 0, 0, 0, 0, 0)`
	)
	var err error
	switch kind {
	case storetest.CorruptCapacity:
		_, err = r.pool.Exec(ctx, res, tenantID, storetest.CorruptID, 0, "{}", 1.0)
	case storetest.CorruptAlpha:
		_, err = r.pool.Exec(ctx, `INSERT INTO resources VALUES ($1, `+gen+`, $2, 1, '{}', 'NaN', 1, 0, 0, 0, 0, 0, 0, 0, 0, '', false, 0)`, tenantID, storetest.CorruptID)
	case storetest.CorruptBeta:
		_, err = r.pool.Exec(ctx, `INSERT INTO cells SELECT pool_id, gen, id, $2, 1, -1, 0, 0, 0, 0, 0 FROM resources WHERE pool_id = $1 AND gen = `+gen+` ORDER BY id LIMIT 1`,
			tenantID, storetest.CorruptID)
	case storetest.CorruptOrphan:
		_, err = r.pool.Exec(ctx, cell, tenantID, storetest.CorruptID, "ctx", 1.0)
	case storetest.CorruptLabels:
		_, err = r.pool.Exec(ctx, res, tenantID, storetest.CorruptID, 1, "{not json", 1.0)
	case storetest.CorruptEmptyID:
		_, err = r.pool.Exec(ctx, res, tenantID, "", 1, "{}", 1.0)
	case storetest.CorruptLongID:
		_, err = r.pool.Exec(ctx, res, tenantID, storetest.LongID(), 1, "{}", 1.0)
	default:
		err = fmt.Errorf("unknown corruption %q", kind)
	}
	return err
}

func openTest(tb testing.TB, dsn string, opts store.Options) *Store {
	tb.Helper()
	s, err := Open(context.Background(), dsn, opts)
	if err != nil {
		tb.Fatalf("Open(ctx, %q) = got error %v, want nil", dsn, err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T, opts store.Options) store.Store {
		return raw{openTest(t, testenv.Postgres(t), opts)}
	})
}

func TestOpenErrors(t *testing.T) {
	tests := []struct {
		name    string
		dsn     string
		wantErr error
	}{
		{name: "malformed", dsn: "postgres://user:secret@host:notaport/db", wantErr: store.ErrInvalid},
		{name: "nobody listening", dsn: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/x?sslmode=disable&connect_timeout=5", testenv.FreePort(t)), wantErr: store.ErrUnavailable},
		{name: "missing database", dsn: withDatabase(t, testenv.Postgres(t), "no_such_db"), wantErr: store.ErrUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(t.Context(), tc.dsn, store.Options{})
			if err == nil {
				s.Close()
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Open(ctx, %q) = got error %v, want %v", tc.dsn, err, tc.wantErr)
			}
			if strings.Contains(fmt.Sprint(err), "secret") {
				t.Fatalf("Open(ctx, %q) = got error %q, want no password in it", tc.dsn, err)
			}
		})
	}
}

func withDatabase(t *testing.T, dsn, db string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("url.Parse(%q) = got error %v, want nil", dsn, err)
	}
	u.Path = "/" + db
	return u.String()
}

// TestOutageIsUnavailable drops the database under a running store: calls
// must then fail with ErrUnavailable, never with ErrNotFound (a lookup of a
// key must not look like a wrong key).
func TestOutageIsUnavailable(t *testing.T) {
	dsn := testenv.Postgres(t)
	s := openTest(t, dsn, store.Options{})
	if _, err := s.CreateTenant(t.Context(), store.Tenant{ID: "acme"}); err != nil {
		t.Fatalf("CreateTenant(ctx, acme) = got error %v, want nil", err)
	}
	admin, err := pgx.Connect(t.Context(), withDatabase(t, dsn, "postgres"))
	if err != nil {
		t.Fatalf("pgx.Connect(admin) = got error %v, want nil", err)
	}
	defer admin.Close(context.Background())
	name := strings.TrimPrefix(must(url.Parse(dsn)).Path, "/")
	if _, err := admin.Exec(t.Context(), "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
		t.Fatalf("DROP DATABASE %s = got error %v, want nil", name, err)
	}
	tests := []struct {
		name string
		call func() error
	}{
		{name: "LookupKey", call: func() error { _, _, err := s.LookupKey(t.Context(), make([]byte, store.DigestLen)); return err }},
		{name: "GetTenant", call: func() error { _, err := s.GetTenant(t.Context(), "acme"); return err }},
		{name: "SaveCheckpoint", call: func() error { return s.SaveCheckpoint(t.Context(), "acme", storetest.Synthetic(2, 2, 1)) }},
		{name: "LoadCheckpoint", call: func() error { _, err := s.LoadCheckpoint(t.Context(), "acme"); return err }},
		{name: "DeleteTenant", call: func() error { return s.DeleteTenant(t.Context(), "acme") }},
		{name: "SigningKey", call: func() error { _, err := s.SigningKey(t.Context()); return err }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrNotFound) {
				t.Fatalf("%s(ctx) with the database gone = got error %v, want ErrUnavailable only", tc.name, err)
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestInstancesShareDatabase opens several stores on one database at once,
// as HA server instances do: migrations run once under the advisory lock,
// and the signing key and epochs are shared.
func TestInstancesShareDatabase(t *testing.T) {
	dsn := testenv.Postgres(t)
	const n = 4
	stores := make([]*Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = Open(t.Context(), dsn, store.Options{}) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open(ctx) instance %d = got error %v, want nil", i, err)
		}
		t.Cleanup(func() { stores[i].Close() })
	}
	keys := make([][]byte, n)
	epochs := make([]uint32, n)
	for i := range n {
		wg.Go(func() {
			keys[i], errs[i] = stores[i].SigningKey(t.Context())
			if errs[i] == nil {
				epochs[i], errs[i] = stores[i].BumpEpoch(t.Context())
			}
		})
	}
	wg.Wait()
	seen := make(map[uint32]bool)
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("instance %d: SigningKey/BumpEpoch = got error %v, want nil", i, errs[i])
		}
		if string(keys[i]) != string(keys[0]) {
			t.Fatalf("SigningKey(ctx) instance %d = got %x, want %x", i, keys[i], keys[0])
		}
		if seen[epochs[i]] {
			t.Fatalf("BumpEpoch(ctx) across instances = got %v, want distinct values", epochs)
		}
		seen[epochs[i]] = true
	}
}

func benchStore(b *testing.B) store.Store {
	b.Helper()
	return openTest(b, testenv.Postgres(b), store.Options{})
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
