package postgres

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/testenv"
)

// TestEpochAfterAnOlderCopy: a store restored from an older dump
// (pg_dump, then pg_restore --clean over the same database) hands out, at
// its next start, an epoch above every epoch handed out before the
// restore, so no fencing token goes back: starts every few minutes, a
// dump, a start and a failover a few seconds apart after it (the counter
// a minute ahead of the clock), the dump restored ten minutes later.
func TestEpochAfterAnOlderCopy(t *testing.T) {
	dsn := testenv.Postgres(t)
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, time.December, 5, 10, 0, 0, 0, time.UTC))
	bump := func() uint32 {
		t.Helper()
		s, err := Open(ctx, dsn, store.Options{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		e, err := s.BumpEpoch(ctx)
		if err != nil {
			t.Fatalf("BumpEpoch = got error %v, want nil", err)
		}
		return e
	}
	var handed []uint32
	handed = append(handed, bump())
	clk.Advance(10 * time.Minute)
	handed = append(handed, bump())
	clk.Advance(10 * time.Minute)
	dump := filepath.Join(t.TempDir(), "older.dump")
	pg(t, "pg_dump", "--format=custom", "--file", dump, "--dbname", dsn)
	clk.Advance(10 * time.Minute)
	handed = append(handed, bump())
	clk.Advance(5 * time.Second)
	handed = append(handed, bump()) // a failover: the counter is a minute ahead
	for i := 1; i < len(handed); i++ {
		if handed[i] <= handed[i-1] {
			t.Fatalf("epochs handed out = %v, want increasing", handed)
		}
	}
	clk.Advance(10 * time.Minute)
	pg(t, "pg_restore", "--clean", "--if-exists", "--single-transaction", "--dbname", dsn, dump)
	next := bump()
	t.Logf("epochs handed out %v; after restoring the dump taken after the second: %d", handed, next)
	if last := handed[len(handed)-1]; next <= last {
		t.Fatalf("the epoch after restoring the older dump = got %d, want above %d, every epoch handed out before (%v)", next, last, handed)
	}
}

// pg runs a PostgreSQL client program (the test cluster trusts local
// connections).
func pg(t *testing.T, prog string, args ...string) {
	t.Helper()
	cmd := exec.Command(prog, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s = got error %v, want nil:\n%s", prog, strings.Join(args, " "), err, out)
	}
}
