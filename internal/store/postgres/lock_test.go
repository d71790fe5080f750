package postgres

import (
	"errors"
	"strings"
	"testing"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/testenv"
)

// TestOneWriter: a second writer claim on the same database fails at once
// with ErrLocked and names the holder's session; the claim is lost when
// its session ends (the database terminated it), and another can take it.
func TestOneWriter(t *testing.T) {
	dsn := testenv.Postgres(t)
	a, b := openTest(t, dsn, store.Options{}), openTest(t, dsn, store.Options{})
	ca, err := a.LockWriter(t.Context())
	if err != nil {
		t.Fatalf("LockWriter(first) = got error %v, want nil", err)
	}
	defer ca.Release()
	_, err = b.LockWriter(t.Context())
	if !errors.Is(err, store.ErrLocked) || !strings.Contains(err.Error(), "repool-writer") {
		t.Fatalf("LockWriter(second) = got %v, want ErrLocked naming the holder's session", err)
	}
	if err := ca.Check(t.Context()); err != nil {
		t.Fatalf("Check() of a held claim = got %v, want nil", err)
	}
	if _, err := b.pool.Exec(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'repool-writer'`); err != nil {
		t.Fatal(err)
	}
	if err := ca.Check(t.Context()); err == nil {
		t.Fatal("Check() after the database ended the claim's session = got nil, want an error")
	}
	cb, err := b.LockWriter(t.Context())
	if err != nil {
		t.Fatalf("LockWriter(after the holder's session ended) = got error %v, want nil", err)
	}
	cb.Release()
}
