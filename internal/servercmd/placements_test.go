package servercmd

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/repool/repool/internal/lb/tenantmap"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/open"
	"github.com/repool/repool/internal/store/postgres"
	"github.com/repool/repool/internal/testenv"
)

// TestOpenPlacementsFollowsTheStore: the front end's placement source is
// the server's PostgreSQL store, read-only: it lists every tenant's group,
// and its fingerprint changes with a move and only then.
func TestOpenPlacementsFollowsTheStore(t *testing.T) {
	dsn := testenv.Postgres(t)
	ctx := context.Background()
	st, err := open.Store(ctx, dsn, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.CreateTenant(ctx, store.Tenant{ID: "acme", Name: "Acme", Group: "default"}); err != nil {
		t.Fatal(err)
	}
	src, closeSrc, err := openPlacements(ctx, dsn)
	if err != nil {
		t.Fatalf("openPlacements = %v", err)
	}
	defer closeSrc()
	fp, ok := src.(tenantmap.Fingerprinter)
	if !ok {
		t.Fatal("the PostgreSQL placement source has no fingerprint")
	}
	before, err := fp.PlacementsFingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := fp.PlacementsFingerprint(ctx); again != before {
		t.Fatalf("fingerprint changed without a change: %q then %q", before, again)
	}
	// Group b's active server, as far as the store sees one: its epoch
	// raised (which registers the group) and its leader lock held.
	bst, err := open.Store(ctx, dsn, store.Options{Group: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer bst.Close()
	if _, err := bst.BumpEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	lock, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close(ctx)
	if _, err := lock.Exec(ctx, `SELECT pg_advisory_lock($1)`, postgres.GroupLockID("b")); err != nil {
		t.Fatal(err)
	}
	if err := st.(store.Groups).MoveTenant(ctx, "acme", "b"); err != nil {
		t.Fatal(err)
	}
	after, err := fp.PlacementsFingerprint(ctx)
	if err != nil || after == before {
		t.Fatalf("fingerprint after a move = %q, %v; before %q: want it changed", after, err, before)
	}
	placed, err := src.Placements(ctx)
	if err != nil || placed["acme"] != "b" {
		t.Fatalf("Placements = %v, %v, want acme on b", placed, err)
	}
	if _, err := src.(store.Store).CreateTenant(ctx, store.Tenant{ID: "x", Name: "x"}); err == nil {
		t.Fatal("the placement source wrote to the store: it must be read-only")
	}
}
