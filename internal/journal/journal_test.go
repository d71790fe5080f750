package journal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/testenv"
)

type memJournal struct {
	mu      sync.Mutex
	commits int
	rows    map[uint64]store.LeaseRow
	fail    error
	gate    chan struct{} // when set, commits wait for it to close
}

func (m *memJournal) WriteLeases(_ context.Context, _ string, put []store.LeaseRow, del []uint64) error {
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

// TestGroupCommit: changes that arrive while a commit is in flight are
// written together in the next one.
func TestGroupCommit(t *testing.T) {
	gate, entered := make(chan struct{}), make(chan struct{})
	st := &memJournal{rows: map[uint64]store.LeaseRow{}, gate: gate}
	var first sync.Once
	w, _ := New(storeFunc(func(ctx context.Context, tenant string, put []store.LeaseRow, del []uint64) error {
		first.Do(func() { close(entered) })
		return st.WriteLeases(ctx, tenant, put, del)
	}), time.Second, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.Start(ctx)
	var wg sync.WaitGroup
	lease := func(i int) {
		if err := w.Leased(context.Background(), "t", pool.Lease{ID: uint64(i), Resource: "r", Context: "c", Token: uint64(i), ExpiresAt: time.Unix(0, 1)}); err != nil {
			t.Error(err)
		}
	}
	wg.Go(func() { lease(1) })
	// The first commit waits at the gate while the other 199 queue.
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first lease's commit did not start within 10s")
	}
	for i := 2; i <= 200; i++ {
		wg.Go(func() { lease(i) })
	}
	testenv.Eventually(t, 10*time.Second, "199 leases to queue behind the first commit", func() bool { return len(w.ops) == 199 })
	close(gate)
	wg.Wait()
	if len(st.rows) != 200 {
		t.Fatalf("journaled %d leases, want 200", len(st.rows))
	}
	if st.commits != 2 {
		t.Fatalf("%d commits for 200 leases, 199 of them queued behind the first commit, want 2", st.commits)
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
	// More than the queue and the batch the writer took before it blocked
	// hold together: the writer may have taken up to maxBatch changes off
	// the queue (it yields to the senders while its batch is small), and
	// the queue must still fill behind them.
	senders := cap(w.ops) + maxBatch + 1000
	errs := make(chan error, senders)
	for i := range senders {
		go func() { errs <- w.Leased(context.Background(), "t", pool.Lease{ID: uint64(i + 1)}) }()
	}
	testenv.Eventually(t, 10*time.Second, "the queue to fill behind the blocked commit", func() bool { return len(w.ops) == cap(w.ops) })
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

// storeFunc is a Store whose WriteLeases is the function.
type storeFunc func(ctx context.Context, tenant string, put []store.LeaseRow, del []uint64) error

func (f storeFunc) WriteLeases(ctx context.Context, tenant string, put []store.LeaseRow, del []uint64) error {
	return f(ctx, tenant, put, del)
}

// TestMultiTenantBatch: the tenants of one batch are written concurrently,
// at most tenantsInFlight at once, one transaction each, and every waiter
// hears the outcome of its own tenant's transaction.
func TestMultiTenantBatch(t *testing.T) {
	const tenants, leasesEach = 8, 3
	boom := errors.New("fenced")
	var (
		mu          sync.Mutex
		inFlight    int
		maxInFlight int
		reached     bool                    // inFlight has reached tenantsInFlight: full is closed
		writes      = map[string][]uint64{} // tenant → leases of each WriteLeases, in order
	)
	entered, release, full := make(chan struct{}), make(chan struct{}), make(chan struct{})
	st := storeFunc(func(_ context.Context, tenant string, put []store.LeaseRow, _ []uint64) error {
		if tenant == "blocker" { // holds the first batch while the next one queues
			close(entered)
			<-release
			return nil
		}
		mu.Lock()
		inFlight++
		maxInFlight = max(maxInFlight, inFlight)
		if inFlight == tenantsInFlight && !reached {
			reached = true
			close(full)
		}
		mu.Unlock()
		// The first writes wait until as many as may run at once do: a
		// writer that runs fewer at once fails here, not by timing.
		select {
		case <-full:
		case <-time.After(10 * time.Second):
			t.Errorf("WriteLeases(%s): %d tenants written at once after 10s, want %d", tenant, inFlight, tenantsInFlight)
		}
		mu.Lock()
		defer mu.Unlock()
		inFlight--
		if _, twice := writes[tenant]; twice {
			t.Errorf("WriteLeases(%s) called twice for one batch", tenant)
		}
		for _, p := range put {
			writes[tenant] = append(writes[tenant], p.ID)
		}
		if tenant == "t3" {
			return boom
		}
		return nil
	})
	w, _ := New(st, time.Second, nil)
	ctx, cancel := context.WithCancel(context.Background())
	wait := w.Start(ctx)
	defer func() { cancel(); wait() }()

	blocked := make(chan error, 1)
	go func() { blocked <- w.Leased(context.Background(), "blocker", pool.Lease{ID: 1}) }()
	<-entered
	type result struct {
		tenant string
		err    error
	}
	results := make(chan result, tenants*leasesEach)
	for i := range tenants {
		tenant := fmt.Sprintf("t%d", i)
		for j := range leasesEach {
			go func() {
				results <- result{tenant, w.Leased(context.Background(), tenant, pool.Lease{ID: uint64(10*i + j)})}
			}()
		}
	}
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("%d changes to queue", tenants*leasesEach), func() bool { return len(w.ops) == tenants*leasesEach })
	close(release)
	if err := <-blocked; err != nil {
		t.Fatalf("Leased(blocker) = got %v, want nil", err)
	}
	for range tenants * leasesEach {
		r := <-results
		var want error // t3's transaction fails; the others commit
		if r.tenant == "t3" {
			want = boom
		}
		if !errors.Is(r.err, want) {
			t.Errorf("Leased(%s) = got %v, want %v", r.tenant, r.err, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if maxInFlight != tenantsInFlight {
		t.Errorf("tenants written at once = got %d, want %d", maxInFlight, tenantsInFlight)
	}
	for i := range tenants {
		tenant := fmt.Sprintf("t%d", i)
		if got := len(writes[tenant]); got != leasesEach {
			t.Errorf("leases of %s written = got %d (%v), want %d in one WriteLeases", tenant, got, writes[tenant], leasesEach)
		}
	}
}

// TestSwapped: a lease released and the next one granted are one change:
// one commit removes the one and writes the other, and within a batch the
// last change of each lease wins, whichever call made it.
func TestSwapped(t *testing.T) {
	var mu sync.Mutex
	var writes [][2][]uint64 // put ids, del ids of each WriteLeases
	gate, entered := make(chan struct{}), make(chan struct{})
	var gated sync.Once
	st := storeFunc(func(_ context.Context, _ string, put []store.LeaseRow, del []uint64) error {
		if len(put) == 1 && put[0].ID == 9 {
			gated.Do(func() { close(entered); <-gate })
		}
		mu.Lock()
		defer mu.Unlock()
		var ids []uint64
		for _, p := range put {
			ids = append(ids, p.ID)
		}
		writes = append(writes, [2][]uint64{ids, del})
		return nil
	})
	w, _ := New(st, time.Second, nil)
	ctx, cancel := context.WithCancel(context.Background())
	wait := w.Start(ctx)
	defer func() { cancel(); wait() }()
	lease := func(id uint64) pool.Lease {
		return pool.Lease{ID: id, Resource: "r", Context: "c", Token: id, ExpiresAt: time.Unix(0, 1)}
	}
	if err := w.Swapped(context.Background(), "t", 1, lease(2)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := fmt.Sprint(writes)
	mu.Unlock()
	if got != "[[[2] [1]]]" {
		t.Fatalf("Swapped(1, 2) wrote %s, want one write putting 2 and removing 1", got)
	}
	// One batch: 3 is granted, then swapped for 4.
	errs := make(chan error, 3)
	go func() { errs <- w.Leased(context.Background(), "t", lease(9)) }() // the gated commit
	<-entered
	go func() { errs <- w.Leased(context.Background(), "t", lease(3)) }()
	testenv.Eventually(t, 10*time.Second, "the grant of 3 to queue", func() bool { return len(w.ops) == 1 })
	go func() { errs <- w.Swapped(context.Background(), "t", 3, lease(4)) }()
	testenv.Eventually(t, 10*time.Second, "the swap of 3 for 4 to queue", func() bool { return len(w.ops) == 2 })
	close(gate)
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if got := fmt.Sprint(writes); got != "[[[2] [1]] [[9] []] [[4] [3]]]" {
		t.Fatalf("writes = %s, want the grant of 9, then one write of the batch that grants 3 and swaps it for 4: 4 put, 3 removed", got)
	}
}

// TestBatchBound: no commit carries more than maxBatch changes, however
// many are queued.
func TestBatchBound(t *testing.T) {
	gate, entered := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var sizes []int
	var first sync.Once
	st := storeFunc(func(_ context.Context, _ string, put []store.LeaseRow, _ []uint64) error {
		first.Do(func() { close(entered); <-gate })
		mu.Lock()
		sizes = append(sizes, len(put))
		mu.Unlock()
		return nil
	})
	w, _ := New(st, time.Second, nil)
	ctx, cancel := context.WithCancel(context.Background())
	wait := w.Start(ctx)
	defer func() { cancel(); wait() }()
	const queued = maxBatch + 500
	var wg sync.WaitGroup
	wg.Go(func() { _ = w.Leased(context.Background(), "t", pool.Lease{ID: 1}) })
	<-entered
	for i := range queued {
		wg.Go(func() {
			if err := w.Leased(context.Background(), "t", pool.Lease{ID: uint64(i + 2)}); err != nil {
				t.Error(err)
			}
		})
	}
	testenv.Eventually(t, 10*time.Second, "the changes to queue", func() bool { return len(w.ops) == queued })
	close(gate)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(sizes) != fmt.Sprint([]int{1, maxBatch, queued - maxBatch}) {
		t.Fatalf("commit sizes %v, want [1 %d %d]", sizes, maxBatch, queued-maxBatch)
	}
}
