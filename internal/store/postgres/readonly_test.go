package postgres

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/storetest"
	"github.com/repool/repool/internal/testenv"
)

func TestReadOnly(t *testing.T) {
	dsn := testenv.Postgres(t)
	storetest.ReadOnly(t, func(t *testing.T, readOnly bool) store.Store {
		return openTest(t, dsn, store.Options{ReadOnly: readOnly})
	})
}

// TestReadOnlyCreatesNoSchema: a read-only open of a database without
// repool's schema fails with store.ErrNotFound and creates no table (no
// migration, not even goose's version table).
func TestReadOnlyCreatesNoSchema(t *testing.T) {
	dsn := testenv.Postgres(t)
	s, err := Open(t.Context(), dsn, store.Options{ReadOnly: true})
	if err == nil {
		s.Close()
	}
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Open(ctx, empty database, ReadOnly) = got error %v, want store.ErrNotFound", err)
	}
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	var n int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("tables after a read-only Open of an empty database = got %d, want 0", n)
	}
}
