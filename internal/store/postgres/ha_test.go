package postgres

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/storetest"
	"github.com/repool/repool/internal/testenv"
)

func TestFenceRefusesADeposedLeader(t *testing.T) {
	dsn := testenv.Postgres(t)
	storetest.Fence(t, openTest(t, dsn, store.Options{}), openTest(t, dsn, store.Options{}))
}

// TestWriteLeasesChangesNothingWhenItFails: a lease journal write that
// fails — refused by the database midway, or fenced after its writes ran —
// leaves the journal as it was and returns its connection to the pool.
func TestWriteLeasesChangesNothingWhenItFails(t *testing.T) {
	dsn := testenv.Postgres(t)
	ctx := context.Background()
	old, successor := openTest(t, dsn, store.Options{}), openTest(t, dsn, store.Options{})
	e1, err := old.BumpEpoch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old.SetFence(e1)
	if _, err := old.CreateTenant(ctx, store.Tenant{ID: "acme", Name: "Acme"}); err != nil {
		t.Fatal(err)
	}
	lease := func(id uint64, exp int64) store.LeaseRow {
		return store.LeaseRow{ID: id, ResourceID: "r", Context: "x", Token: id, ExpiresAt: exp}
	}
	want := []store.LeaseRow{lease(1, 100), lease(2, 100)}
	if err := old.WriteLeases(ctx, "acme", want, nil); err != nil {
		t.Fatalf("WriteLeases(current leader) = got error %v, want nil", err)
	}
	unchanged := func(what string) {
		t.Helper()
		got, err := successor.LoadLeases(ctx, "acme")
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("LoadLeases after %s = got %+v, %v, want %+v", what, got, err, want)
		}
		if n := old.pool.Stat().AcquiredConns(); n != 0 {
			t.Errorf("connections still acquired after %s = got %d, want 0", what, n)
		}
	}

	// The same lease twice in one upsert fails the insert, after the delete.
	err = old.WriteLeases(ctx, "acme", []store.LeaseRow{lease(3, 100), lease(3, 200)}, []uint64{1})
	if err == nil || errors.Is(err, store.ErrFenced) {
		t.Errorf("WriteLeases(a lease twice) = got error %v, want a database error", err)
	}
	unchanged("a write the database refused")

	e2, err := successor.BumpEpoch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	successor.SetFence(e2)
	err = old.WriteLeases(ctx, "acme", []store.LeaseRow{lease(1, 999), lease(4, 100)}, []uint64{2})
	if !errors.Is(err, store.ErrFenced) {
		t.Errorf("WriteLeases(deposed leader) = got error %v, want ErrFenced", err)
	}
	unchanged("a fenced write")

	if err := successor.WriteLeases(ctx, "acme", []store.LeaseRow{lease(4, 100)}, []uint64{2}); err != nil {
		t.Fatalf("WriteLeases(new leader) = got error %v, want nil", err)
	}
	want = []store.LeaseRow{lease(1, 100), lease(4, 100)}
	unchanged("the new leader's write")
}

func second[T any](_ T, err error) error { return err }

func TestLeaseJournal(t *testing.T) {
	dsn := testenv.Postgres(t)
	ctx := context.Background()
	s := openTest(t, dsn, store.Options{})
	for _, id := range []string{"a", "b"} {
		if _, err := s.CreateTenant(ctx, store.Tenant{ID: id, Name: id}); err != nil {
			t.Fatal(err)
		}
	}
	put := []store.LeaseRow{{ID: 1, ResourceID: "r", Context: "x", Token: 10, ExpiresAt: 100}, {ID: 2, ResourceID: "r", Context: "y", Token: 11, ExpiresAt: 200}}
	if err := s.WriteLeases(ctx, "a", put, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteLeases(ctx, "b", put[:1], nil); err != nil {
		t.Fatal(err)
	}
	// Renew 2, end 1.
	if err := s.WriteLeases(ctx, "a", []store.LeaseRow{{ID: 2, ResourceID: "r", Context: "y", Token: 11, ExpiresAt: 300}}, []uint64{1}); err != nil {
		t.Fatal(err)
	}
	got, err := s.LoadLeases(ctx, "a")
	if err != nil || len(got) != 1 || got[0].ID != 2 || got[0].ExpiresAt != 300 {
		t.Fatalf("LoadLeases(a) = %+v, %v; want lease 2 renewed to 300", got, err)
	}
	if err := s.DeleteTenant(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM lease_journal WHERE pool_id = 'a'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("lease_journal rows of a deleted tenant = %d, %v; want 0", n, err)
	}
	if got, _ := s.LoadLeases(ctx, "b"); len(got) != 1 {
		t.Fatalf("LoadLeases(b) after deleting a = %+v, want b's lease intact", got)
	}
}

func TestGroups(t *testing.T) {
	dsn := testenv.Postgres(t)
	storetest.Groups(t, func(t *testing.T, g string) storetest.GroupStore {
		return openTest(t, dsn, store.Options{Group: g})
	}, func(t *testing.T, g string) func() {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(context.Background(), `SELECT pg_advisory_lock($1)`, GroupLockID(g)); err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		// Unlocked before the session ends, so that the lock is free when
		// release returns (a closed session frees it a moment later).
		release := func() {
			once.Do(func() {
				conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, GroupLockID(g))
				conn.Close(context.Background())
			})
		}
		t.Cleanup(release)
		return release
	})
}

// TestRecoveryWaitsForAFencedWrite: a recovery of a tenant stranded on
// group b, made while a write of b's (still running on its epoch) holds
// b's epoch row and is about to read the tenant's placement, waits for
// that write and then succeeds; neither is aborted as a deadlock. The
// write is the fenced write's own SQL (fenceSQL, then placementSQL), held
// open between the two.
func TestRecoveryWaitsForAFencedWrite(t *testing.T) {
	dsn := testenv.Postgres(t)
	ctx := context.Background()
	a, b := openTest(t, dsn, store.Options{}), openTest(t, dsn, store.Options{Group: "b"})
	ea, err := a.BumpEpoch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a.SetFence(ea)
	eb, err := b.BumpEpoch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.SetFence(eb)
	leader, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Close(ctx)
	// The default group is live throughout (a recovery's target must be);
	// b is live only while t1 is placed there.
	if _, err := leader.Exec(ctx, `SELECT pg_advisory_lock($1), pg_advisory_lock($2)`, GroupLockID(store.DefaultGroup), GroupLockID("b")); err != nil {
		t.Fatal(err)
	}
	if got, err := a.CreateTenant(ctx, store.Tenant{ID: "t1", Name: "t1", Group: "b"}); err != nil || got.Group != "b" {
		t.Fatalf("CreateTenant(t1 on b) = got %+v, %v", got, err)
	}
	if _, err := leader.Exec(ctx, `SELECT pg_advisory_unlock($1)`, GroupLockID("b")); err != nil {
		t.Fatal(err)
	}

	write, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer write.Close(ctx)
	tx, err := write.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var pid int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	var cur int64
	if err := tx.QueryRow(ctx, fenceSQL, store.EpochCounter("b")).Scan(&cur); err != nil || cur != int64(eb) {
		t.Fatalf("b's fence = got %d, %v, want %d", cur, err, eb)
	}

	type result struct {
		rec store.Recovered
		err error
	}
	done := make(chan result, 1)
	go func() {
		rec, err := a.RecoverTenant(ctx, "t1", store.DefaultGroup)
		done <- result{rec, err}
	}()
	testenv.Eventually(t, 10*time.Second, "the recovery to wait for a lock b's write holds", func() bool {
		var n int
		err := a.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted AND $1 = ANY(pg_blocking_pids(pid))`, pid).Scan(&n)
		return err == nil && n > 0
	})
	var placement string
	if err := tx.QueryRow(ctx, placementSQL, "t1").Scan(&placement); err != nil || placement != "b" {
		t.Fatalf("b's write reading t1's placement while a recovery waits = got %q, %v, want b", placement, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("b's write commit = %v", err)
	}
	r := <-done
	if r.err != nil || r.rec.From != "b" || r.rec.FencedEpoch <= eb {
		t.Fatalf("RecoverTenant(t1) after b's write = got %+v, %v, want from b with b's epoch raised above %d", r.rec, r.err, eb)
	}
}
