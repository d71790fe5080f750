package server

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/open"
	"github.com/repool/repool/internal/testenv"
)

// TestSecondServerOnTheSameStoreRefuses: a second server started on a
// SQLite store that a running server holds waits --store-lock-wait (300 ms
// here; 30 s by default) and then fails before it writes or binds anything,
// saying which store and which process hold it, and how long it waited.
func TestSecondServerOnTheSameStoreRefuses(t *testing.T) {
	st := sqliteStore(t)
	start(t, Config{Store: st})
	_, err := New(context.Background(), Config{Store: st, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", StoreLockWait: 300 * time.Millisecond}, Options{})
	if !errors.Is(err, store.ErrLocked) || !strings.Contains(err.Error(), strings.TrimPrefix(st, "sqlite:")) || !strings.Contains(err.Error(), "held by process") ||
		!strings.Contains(err.Error(), "waited 300ms") {
		t.Fatalf("New(store in use) = got %v, want ErrLocked naming the store, the process and the 300ms waited", err)
	}
}

// TestServerStopsWhenItsStoreIsReplaced: a server whose database file is
// replaced under it stops serving and its Run returns why, instead of
// writing into a file that is no longer the store.
func TestServerStopsWhenItsStoreIsReplaced(t *testing.T) {
	st := sqliteStore(t)
	r := start(t, Config{Store: st})
	path := strings.TrimPrefix(st, "sqlite:")
	if err := os.WriteFile(path+".new", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-r.done:
		r.cancel = nil // stopped already
		if err == nil || !strings.Contains(err.Error(), "replaced") {
			t.Fatalf("Run() after the store file was replaced = got %v, want an error saying it was replaced", err)
		}
	case <-time.After(10 * time.Second): // the claim is checked every second
		t.Fatal("Run() still serving 10s after its store file was replaced")
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Fatalf("the replacing file after the server stopped = got %v, %v, want it left empty (nothing written into it)", fi, err)
	}
}

// cellSuccesses reads, from a separate handle on the store, the successes
// stored for resource r in context c.
func cellSuccesses(t *testing.T, st, r, c string) float64 {
	t.Helper()
	s, err := open.Store(t.Context(), st, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ps, err := s.LoadCheckpoint(t.Context(), "demo")
	if err != nil {
		t.Fatal(err)
	}
	for _, cell := range ps.Cells {
		if cell.ResourceID == r && cell.Context == c {
			return cell.Alpha
		}
	}
	return 0
}

// TestReportsReachTheStore: with DurableReports a report is in the store
// when it is acknowledged, though the server's (fake) clock never reaches
// the flush; without, once the clock passes ReportFlush.
func TestReportsReachTheStore(t *testing.T) {
	for _, durable := range []bool{true, false} {
		name := "flushed"
		if durable {
			name = "durable"
		}
		t.Run(name, func(t *testing.T) {
			st := sqliteStore(t)
			fake := clock.NewFake(time.Now())
			r := startWith(t, Config{Store: st, DurableReports: durable, ReportFlush: time.Minute}, Options{Clock: fake})
			ctx := withKey(r.key)
			if _, err := r.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r"}}}); err != nil {
				t.Fatal(err)
			}
			base := cellSuccesses(t, st, "r", "x")
			for range 3 {
				if _, err := r.pool.Report(ctx, &repoolv1.ReportRequest{ResourceId: "r", Context: "x", Outcome: repoolv1.Outcome_SUCCESS}); err != nil {
					t.Fatal(err)
				}
			}
			if durable {
				if got := cellSuccesses(t, st, "r", "x"); got < base+2.99 {
					t.Fatalf("stored successes once 3 durable reports were acknowledged = got %v, want >= %v", got, base+2.99)
				}
				return
			}
			if got := cellSuccesses(t, st, "r", "x"); got >= base+2.99 {
				t.Fatalf("stored successes before the flush = %v: flushed early", got)
			}
			// Each poll moves the clock past a flush; the round then runs
			// on its own goroutine.
			testenv.Eventually(t, 10*time.Second, "3 reports' successes in the store once ReportFlush passed", func() bool {
				fake.Advance(time.Minute)
				return cellSuccesses(t, st, "r", "x") >= base+2.99
			})
		})
	}
}
