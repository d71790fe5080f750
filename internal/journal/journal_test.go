package journal

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/store"
)

type memJournal struct {
	mu      sync.Mutex
	commits int
	rows    map[uint64]store.LeaseRow
	fail    error
	slow    time.Duration
}

func (m *memJournal) WriteLeases(_ context.Context, _ string, put []store.LeaseRow, del []uint64) error {
	time.Sleep(m.slow)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	m.commits++
	for _, d := range del {
		delete(m.rows, d)
	}
	for _, p := range put {
		m.rows[p.ID] = p
	}
	return nil
}

func TestGroupCommit(t *testing.T) {
	st := &memJournal{rows: map[uint64]store.LeaseRow{}, slow: 5 * time.Millisecond}
	w, _ := New(st, time.Second, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	var wg sync.WaitGroup
	for i := 1; i <= 200; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if err := w.Leased(context.Background(), "t", pool.Lease{ID: uint64(i), Resource: "r", Context: "c", Token: uint64(i), ExpiresAt: time.Unix(0, 1)}); err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	if len(st.rows) != 200 {
		t.Fatalf("journaled %d leases, want 200", len(st.rows))
	}
	if st.commits >= 200 {
		t.Fatalf("%d commits for 200 concurrent leases, want them batched", st.commits)
	}
	if err := w.Ended(context.Background(), "t", 7); err != nil {
		t.Fatal(err)
	}
	if _, ok := st.rows[7]; ok {
		t.Fatal("ended lease still journaled")
	}
}

func TestErrorsReachEveryWaiter(t *testing.T) {
	boom := errors.New("fenced")
	st := &memJournal{rows: map[uint64]store.LeaseRow{}, fail: boom}
	w, _ := New(st, time.Second, nil)
	ctx, cancel := context.WithCancel(context.Background())
	go w.Run(ctx)
	if err := w.Leased(context.Background(), "t", pool.Lease{ID: 1}); !errors.Is(err, boom) {
		t.Fatalf("Leased() = %v, want the store's error", err)
	}
	cancel()
	time.Sleep(10 * time.Millisecond)
	if err := w.Leased(context.Background(), "t", pool.Lease{ID: 2}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Leased() after stop = %v, want ErrClosed", err)
	}
}
