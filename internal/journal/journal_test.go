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
	gate    chan struct{} // when set, commits wait for it to close
}

func (m *memJournal) WriteLeases(_ context.Context, _ string, put []store.LeaseRow, del []uint64) error {
	time.Sleep(m.slow)
	if m.gate != nil {
		<-m.gate
	}
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
	w.Start(ctx)
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
	wait := w.Start(ctx)
	if err := w.Leased(context.Background(), "t", pool.Lease{ID: 1}); !errors.Is(err, boom) {
		t.Fatalf("Leased() = %v, want the store's error", err)
	}
	cancel()
	wait()
	if err := w.Leased(context.Background(), "t", pool.Lease{ID: 2}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Leased() after stop = %v, want ErrClosed", err)
	}
}

// TestStartAgainAfterStop: a server starts the writer once per term as the
// active server; a second term journals again.
func TestStartAgainAfterStop(t *testing.T) {
	st := &memJournal{rows: map[uint64]store.LeaseRow{}}
	w, _ := New(st, time.Second, nil)
	for term := 1; term <= 3; term++ {
		ctx, cancel := context.WithCancel(context.Background())
		wait := w.Start(ctx)
		if err := w.Leased(context.Background(), "t", pool.Lease{ID: uint64(term)}); err != nil {
			t.Fatalf("term %d: Leased() = %v", term, err)
		}
		cancel()
		wait()
		if err := w.Leased(context.Background(), "t", pool.Lease{ID: 100}); !errors.Is(err, ErrClosed) {
			t.Fatalf("term %d: Leased() between terms = %v, want ErrClosed", term, err)
		}
	}
	if len(st.rows) != 3 {
		t.Fatalf("journaled %d leases over three terms, want 3", len(st.rows))
	}
}

// TestStopWithAFullQueue: senders blocked on a full queue do not hold up
// the stop; they get ErrClosed.
func TestStopWithAFullQueue(t *testing.T) {
	block := make(chan struct{})
	st := &memJournal{rows: map[uint64]store.LeaseRow{}, gate: block}
	w, _ := New(st, time.Second, nil)
	ctx, cancel := context.WithCancel(context.Background())
	wait := w.Start(ctx)
	const senders = 5000 // more than the queue holds
	errs := make(chan error, senders)
	for i := range senders {
		go func() { errs <- w.Leased(context.Background(), "t", pool.Lease{ID: uint64(i + 1)}) }()
	}
	time.Sleep(50 * time.Millisecond) // let the queue fill behind the blocked commit
	cancel()
	close(block)
	stopped := make(chan struct{})
	go func() { wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not stop with senders blocked on a full queue")
	}
	for range senders {
		if err := <-errs; err != nil && !errors.Is(err, ErrClosed) {
			t.Fatalf("Leased() = %v, want nil or ErrClosed", err)
		}
	}
}
