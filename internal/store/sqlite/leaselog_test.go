package sqlite

import (
	"cmp"
	"errors"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/repool/repool/internal/store"
)

func row(id uint64, exp int64) store.LeaseRow {
	return store.LeaseRow{ID: id, ResourceID: "r", Context: "c", Token: id + 100, ExpiresAt: exp}
}

// claimed opens the file store at path with a tenant "a" and takes its
// writer claim; the claim is released at cleanup unless the test drops it.
func claimed(t *testing.T, path string) (*Store, store.Claim) {
	t.Helper()
	s := openTest(t, path, store.Options{})
	if _, err := s.CreateTenant(t.Context(), store.Tenant{ID: "a", Name: "A"}); err != nil && !errors.Is(err, store.ErrExists) {
		t.Fatal(err)
	}
	c, err := s.LockWriter(t.Context())
	if err != nil {
		t.Fatalf("LockWriter = got error %v, want nil", err)
	}
	return s, c
}

// crash leaves s as a killed server would: its handles closed, its lease
// log not folded, the flocks of its claim gone.
func crash(s *Store, c store.Claim) {
	s.Close()
	c.(*fileClaim).lock.Close()
}

func mustWrite(t *testing.T, s *Store, put []store.LeaseRow, del []uint64) {
	t.Helper()
	if err := s.WriteLeases(t.Context(), "a", put, del); err != nil {
		t.Fatalf("WriteLeases(put %v, del %v) = got error %v, want nil", put, del, err)
	}
}

func mustLoad(t *testing.T, s *Store) []store.LeaseRow {
	t.Helper()
	got, err := s.LoadLeases(t.Context(), "a")
	if err != nil {
		t.Fatalf("LoadLeases(a) = got error %v, want nil", err)
	}
	return got
}

// TestLeaseLogSurvivesACrash: lease changes written under the claim are in
// the log, not yet in the table; a writer that dies without folding (its
// handles closed, no Release) loses none of them: a read-only store sees
// them in the log, and the next writer replays them into the table.
func TestLeaseLogSurvivesACrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "repool.db")
	s, c0 := claimed(t, path)
	mustWrite(t, s, []store.LeaseRow{row(1, 10), row(2, 20), row(3, 30)}, nil)
	mustWrite(t, s, []store.LeaseRow{row(2, 25)}, []uint64{3})
	want := []store.LeaseRow{row(1, 10), row(2, 25)}

	if got, err := s.tableLeases(t.Context(), "a"); err != nil || len(got) != 0 {
		t.Fatalf("lease_journal table before a fold = got %v, %v, want empty (the changes are in the log)", got, err)
	}
	ro, err := Open(t.Context(), path, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if got := mustLoad(t, ro); !slices.Equal(got, want) {
		t.Fatalf("read-only LoadLeases(a) while the writer runs = got %v, want %v", got, want)
	}

	crash(s, c0)
	next, c := claimed(t, path)
	defer c.Release()
	if got := mustLoad(t, next); !slices.Equal(got, want) {
		t.Fatalf("LoadLeases(a) after the crash = got %v, want %v", got, want)
	}
	if got, err := next.tableLeases(t.Context(), "a"); err != nil || !slices.Equal(got, want) {
		t.Fatalf("lease_journal table after the replay = got %v, %v, want %v", got, err, want)
	}
	if fi, err := os.Stat(path + leaseLogSuffix); err != nil || fi.Size() != 0 {
		t.Fatalf("lease log after the replay = got %v, %v, want empty", fi, err)
	}
}

// TestLeaseLogTornTail: a record cut short by a crash (never acknowledged)
// is cut off at the next open; the whole records before it are kept and
// later appends are replayed after them.
func TestLeaseLogTornTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "repool.db")
	s, c0 := claimed(t, path)
	mustWrite(t, s, []store.LeaseRow{row(1, 10)}, nil)
	crash(s, c0)
	whole := appendRecord(nil, "a", []store.LeaseRow{row(2, 20)}, nil)
	f, err := os.OpenFile(path+leaseLogSuffix, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(whole[:len(whole)-3])
	f.Close()

	next, c := claimed(t, path)
	mustWrite(t, next, []store.LeaseRow{row(4, 40)}, nil)
	crash(next, c) // a second crash, with a record after the cut
	last, c2 := claimed(t, path)
	defer c2.Release()
	if got, want := mustLoad(t, last), []store.LeaseRow{row(1, 10), row(4, 40)}; !slices.Equal(got, want) {
		t.Fatalf("LoadLeases(a) after a torn tail = got %v, want %v", got, want)
	}
}

// TestLeaseLogReplaced: once the log file is replaced under the writer,
// its appends are refused with ErrFenced (their bytes went to a file no
// one reads) and every later one too; the claim's check fails.
func TestLeaseLogReplaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "repool.db")
	s, c := claimed(t, path)
	defer c.Release()
	mustWrite(t, s, []store.LeaseRow{row(1, 10)}, nil)
	if err := os.WriteFile(path+".new", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path+leaseLogSuffix); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.WriteLeases(t.Context(), "a", []store.LeaseRow{row(2, 20)}, nil); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("WriteLeases after the log was replaced = got %v, want ErrFenced", err)
		}
	}
	if err := c.Check(t.Context()); err == nil {
		t.Fatalf("claim Check after the log was replaced = got nil, want an error naming the lease log")
	}
}

// TestLeaseLogHeld: a second writer on the same log is refused with
// ErrLocked while the first holds it, even with the claim's lock file gone.
func TestLeaseLogHeld(t *testing.T) {
	path := filepath.Join(t.TempDir(), "repool.db")
	_, c := claimed(t, path)
	defer c.Release()
	if err := os.Remove(path + ".lock"); err != nil {
		t.Fatal(err)
	}
	other := openTest(t, path, store.Options{})
	if _, err := other.LockWriter(t.Context()); !errors.Is(err, store.ErrLocked) {
		t.Fatalf("LockWriter of a second writer = got %v, want ErrLocked (the lease log is held)", err)
	}
}

// TestLeaseLogFoldAndPrune: a compaction moves the log's changes into the
// table, removes the expired and empties the log; removals of folded rows
// reach the table at the next one.
func TestLeaseLogFoldAndPrune(t *testing.T) {
	path := filepath.Join(t.TempDir(), "repool.db")
	s, c := claimed(t, path)
	defer c.Release()
	mustWrite(t, s, []store.LeaseRow{row(1, 10), row(2, 20), row(3, 30)}, nil)
	if err := s.PruneLeases(t.Context(), 15); err != nil {
		t.Fatal(err)
	}
	if got, err := s.tableLeases(t.Context(), "a"); err != nil || !slices.Equal(got, []store.LeaseRow{row(2, 20), row(3, 30)}) {
		t.Fatalf("table after PruneLeases(15) = got %v, %v, want leases 2 and 3", got, err)
	}
	mustWrite(t, s, nil, []uint64{2})
	// Removals apply before puts, as in the table's transaction.
	mustWrite(t, s, []store.LeaseRow{row(5, 50)}, []uint64{5})
	if got, want := mustLoad(t, s), []store.LeaseRow{row(3, 30), row(5, 50)}; !slices.Equal(got, want) {
		t.Fatalf("LoadLeases(a) = got %v, want %v", got, want)
	}
	if err := s.PruneLeases(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	if got, err := s.tableLeases(t.Context(), "a"); err != nil || !slices.Equal(got, []store.LeaseRow{row(3, 30), row(5, 50)}) {
		t.Fatalf("table after the second fold = got %v, %v, want leases 3 and 5", got, err)
	}
	if n := len(s.log.Load().pending); n != 0 {
		t.Fatalf("pending changes after a fold = got %d, want 0", n)
	}
}

// TestRecordRoundTrip: what appendRecord writes, decodeRecords reads back,
// record by record; a cut anywhere yields the whole records before it.
func TestRecordRoundTrip(t *testing.T) {
	recs := []leaseRecord{
		{tenant: "a", put: []store.LeaseRow{row(1, -5), {ID: 1 << 63, ResourceID: "ü", Context: "", Token: ^uint64(0), ExpiresAt: 1 << 62}}},
		{tenant: "b", del: []uint64{0, 7, 1 << 40}},
		{tenant: "a", put: []store.LeaseRow{row(9, 9)}, del: []uint64{1}},
	}
	var b []byte
	var ends []int
	for _, r := range recs {
		b = appendRecord(b, r.tenant, r.put, r.del)
		ends = append(ends, len(b))
	}
	got, n, err := decodeRecords(b)
	if err != nil || n != len(b) || len(got) != len(recs) {
		t.Fatalf("decodeRecords(3 records) = got %d records, %d bytes, %v, want 3, %d, nil", len(got), n, err, len(b))
	}
	for i := range recs {
		if got[i].tenant != recs[i].tenant || !slices.Equal(got[i].put, recs[i].put) || !slices.Equal(got[i].del, recs[i].del) {
			t.Fatalf("record %d = got %+v, want %+v", i, got[i], recs[i])
		}
	}
	for cut := 0; cut < len(b); cut++ {
		got, n, err := decodeRecords(b[:cut])
		whole := 0
		for _, e := range ends {
			if e <= cut {
				whole++
			}
		}
		if len(got) != whole || (whole > 0 && n != ends[whole-1]) || (n != cut) != (err != nil) {
			t.Fatalf("decodeRecords(first %d bytes) = got %d records, %d bytes, %v, want %d whole records", cut, len(got), n, err, whole)
		}
	}
}

// FuzzDecodeRecords: any bytes decode without panicking into whole
// records that take at most the input, and the records re-encoded decode
// to the same records.
func FuzzDecodeRecords(f *testing.F) {
	f.Add(appendRecord(nil, "a", []store.LeaseRow{row(1, 1)}, []uint64{2}))
	f.Add(appendRecord(appendRecord(nil, "t", nil, nil), "u", []store.LeaseRow{row(3, -3)}, nil))
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, n, err := decodeRecords(b)
		if n > len(b) || (err == nil) != (n == len(b)) {
			t.Fatalf("decodeRecords = got %d of %d bytes, err %v", n, len(b), err)
		}
		var again []byte
		for _, r := range recs {
			again = appendRecord(again, r.tenant, r.put, r.del)
		}
		back, m, err := decodeRecords(again)
		if err != nil || m != len(again) || len(back) != len(recs) {
			t.Fatalf("decodeRecords(re-encoded) = got %d records, %v, want %d", len(back), err, len(recs))
		}
		for i := range recs {
			if back[i].tenant != recs[i].tenant || !slices.Equal(back[i].put, recs[i].put) || !slices.Equal(back[i].del, recs[i].del) {
				t.Fatalf("record %d re-encoded = got %+v, want %+v", i, back[i], recs[i])
			}
		}
	})
}

// TestLeaseLogConcurrent: tenants appending at once (the journal writes
// different tenants concurrently) while compactions fold the log and
// restores read it: every tenant loads exactly its own last changes, before
// and after a crash.
func TestLeaseLogConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "repool.db")
	s, c := claimed(t, path)
	tenants := []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"}
	for _, id := range tenants {
		if _, err := s.CreateTenant(t.Context(), store.Tenant{ID: id, Name: id}); err != nil {
			t.Fatal(err)
		}
	}
	want := make([]map[uint64]store.LeaseRow, len(tenants))
	done := make(chan struct{})
	var folds sync.WaitGroup
	folds.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := s.PruneLeases(t.Context(), 0); err != nil {
				t.Errorf("PruneLeases = got error %v, want nil", err)
				return
			}
			if _, err := s.LoadLeases(t.Context(), "t0"); err != nil {
				t.Errorf("LoadLeases = got error %v, want nil", err)
				return
			}
		}
	})
	var writers sync.WaitGroup
	for i, tenant := range tenants {
		want[i] = map[uint64]store.LeaseRow{}
		writers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			for range 300 {
				id := rng.Uint64N(20) + 1
				r := store.LeaseRow{ID: id, ResourceID: tenant, Context: "c", Token: rng.Uint64(), ExpiresAt: rng.Int64N(1000) + 1}
				if rng.IntN(3) == 0 {
					if err := s.WriteLeases(t.Context(), tenant, nil, []uint64{id}); err != nil {
						t.Errorf("WriteLeases(%s, del) = got error %v, want nil", tenant, err)
						return
					}
					delete(want[i], id)
				} else {
					if err := s.WriteLeases(t.Context(), tenant, []store.LeaseRow{r}, nil); err != nil {
						t.Errorf("WriteLeases(%s, put) = got error %v, want nil", tenant, err)
						return
					}
					want[i][id] = r
				}
			}
		})
	}
	writers.Wait()
	close(done)
	folds.Wait()
	check := func(s *Store, when string) {
		t.Helper()
		for i, tenant := range tenants {
			got, err := s.LoadLeases(t.Context(), tenant)
			if err != nil {
				t.Fatal(err)
			}
			w := slices.SortedFunc(maps.Values(want[i]), func(a, b store.LeaseRow) int { return cmp.Compare(a.ID, b.ID) })
			if !slices.Equal(got, w) {
				t.Fatalf("LoadLeases(%s) %s = got %v, want %v", tenant, when, got, w)
			}
		}
	}
	check(s, "after the load")
	crash(s, c)
	next, c2 := claimed(t, path)
	defer c2.Release()
	check(next, "after a crash")
}
