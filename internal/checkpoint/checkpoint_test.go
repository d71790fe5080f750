package checkpoint

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/sqlite"
	"github.com/repool/repool/internal/tenants"
	"github.com/repool/repool/internal/testenv"
)

// flakyStore counts checkpoint rows and fails the saves of chosen tenants,
// and the loads of chosen tenants.
type flakyStore struct {
	store.Store
	mu       sync.Mutex
	fail     map[string]bool
	failLoad map[string]bool
	hold     map[string]chan struct{} // a save of the tenant waits for it to close
	stall    map[string]bool          // a save of the tenant waits for its context to end
	saved    map[string]store.Checkpoint
	writes   map[string]int // SaveCheckpoint calls per tenant
}

func (f *flakyStore) LoadCheckpoint(ctx context.Context, tenant string) (store.PoolState, error) {
	f.mu.Lock()
	fail := f.failLoad[tenant]
	f.mu.Unlock()
	if fail {
		return store.PoolState{}, fmt.Errorf("%w: injected", store.ErrUnavailable)
	}
	return f.Store.LoadCheckpoint(ctx, tenant)
}

func (f *flakyStore) SaveCheckpoint(ctx context.Context, tenant string, cp store.Checkpoint) error {
	f.mu.Lock()
	fail, hold, stall := f.fail[tenant], f.hold[tenant], f.stall[tenant]
	f.saved[tenant] = cp
	f.writes[tenant]++
	f.mu.Unlock()
	if hold != nil {
		<-hold
	}
	if stall {
		<-ctx.Done()
		return ctx.Err()
	}
	if fail {
		return fmt.Errorf("%w: injected", store.ErrUnavailable)
	}
	return f.Store.SaveCheckpoint(ctx, tenant, cp)
}

func (f *flakyStore) last(tenant string) store.Checkpoint {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.saved[tenant]
}

type env struct {
	path  string
	st    *flakyStore
	pools *tenants.Registry
	cp    *Checkpointer
	reg   *prometheus.Registry
	clock *clock.Fake // the checkpointer's
}

func open(t *testing.T, path string) *env {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &env{path: path, st: &flakyStore{Store: st, fail: map[string]bool{}, failLoad: map[string]bool{}, hold: map[string]chan struct{}{}, stall: map[string]bool{}, saved: map[string]store.Checkpoint{}, writes: map[string]int{}},
		reg: prometheus.NewRegistry(), clock: clock.NewFake(time.Unix(1_800_000_000, 0))}
	e.pools = tenants.NewRegistry(func(string) (*pool.Pool, error) { return pool.New(pool.Config{}) })
	// TenantTimeout is the default (30 s): a round of a few hundred cells
	// under the race detector on a machine whose cores are busy took more
	// than the 200 ms it once was here. Only TestHangingTenantFailsAlone
	// shortens it, for the tenant it makes hang.
	e.cp, err = New(Config{Store: e.st, Pools: e.pools, Metrics: e.reg, Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func setup(t *testing.T) *env {
	t.Helper()
	e := open(t, filepath.Join(t.TempDir(), "repool.db"))
	for _, id := range []string{"a", "b"} {
		if _, err := e.st.CreateTenant(context.Background(), store.Tenant{ID: id, Name: id}); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func fill(t *testing.T, p *pool.Pool, prefix string, n int) {
	t.Helper()
	var specs []pool.Spec
	for i := 0; i < n; i++ {
		specs = append(specs, pool.Spec{ID: fmt.Sprintf("%s%03d", prefix, i), Capacity: 2, Labels: map[string]string{"owner": prefix}})
	}
	if _, _, err := p.Register(specs); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		for _, c := range []string{"x", "y"} {
			if _, err := p.Report(pool.Report{Resource: specs[i].ID, Context: c, Outcome: pool.Outcome(1 + i%2)}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func poolOf(t *testing.T, e *env, tenant string) *pool.Pool {
	t.Helper()
	p, err := e.pools.Pool(tenant)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckpointAThenBBothIntact(t *testing.T) {
	e := setup(t)
	fill(t, poolOf(t, e, "a"), "a", 20)
	if err := e.cp.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	fill(t, poolOf(t, e, "b"), "b", 10)
	if err := e.cp.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantA, wantB := poolOf(t, e, "a").Snapshot(), poolOf(t, e, "b").Snapshot()

	r := open(t, e.path)
	if failed, err := r.cp.RestoreAll(context.Background()); err != nil || failed != 0 {
		t.Fatalf("RestoreAll() = %d, %v", failed, err)
	}
	for tenant, want := range map[string]pool.Snapshot{"a": wantA, "b": wantB} {
		got := poolOf(t, r, tenant).Snapshot()
		if len(got.Resources) != len(want.Resources) || len(got.Cells) != len(want.Cells) || got.LastToken != want.LastToken {
			t.Fatalf("tenant %s restored %d resources, %d cells, token %d; want %d, %d, %d",
				tenant, len(got.Resources), len(got.Cells), got.LastToken, len(want.Resources), len(want.Cells), want.LastToken)
		}
		for _, res := range got.Resources {
			if res.Labels["owner"] != tenant {
				t.Fatalf("tenant %s restored resource %s of another tenant", tenant, res.ID)
			}
		}
	}
}

func TestIncrementalAfterFull(t *testing.T) {
	e := setup(t)
	p := poolOf(t, e, "a")
	fill(t, p, "a", 100)
	if err := e.cp.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if cp := e.st.last("a"); !cp.Full || len(cp.Cells) != 200 {
		t.Fatalf("first checkpoint full=%v cells=%d, want full with 200", cp.Full, len(cp.Cells))
	}
	if _, err := p.Report(pool.Report{Resource: "a007", Context: "x", Outcome: pool.Success}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.Deregister([]string{"a050"}); err != nil {
		t.Fatal(err)
	}
	if err := e.cp.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	cp := e.st.last("a")
	if cp.Full || len(cp.Cells) != 1 || len(cp.Resources) != 1 || len(cp.Removed) != 1 {
		t.Fatalf("second checkpoint full=%v resources=%d cells=%d removed=%v; want incremental 1/1/[a050]", cp.Full, len(cp.Resources), len(cp.Cells), cp.Removed)
	}
	r := open(t, e.path)
	if _, err := r.cp.RestoreAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	rp := poolOf(t, r, "a")
	if rp.HasResource("a050") || !rp.HasResource("a051") {
		t.Fatal("incremental checkpoint lost a removal or a resource")
	}
	info, _ := rp.Get("a007")
	orig, _ := p.Get("a007")
	if d := info.Contexts[0].Successes - orig.Contexts[0].Successes; d > 1e-6 || d < -1e-6 {
		t.Fatalf("restored a007/x successes %v, want %v", info.Contexts[0].Successes, orig.Contexts[0].Successes)
	}
}

func TestFailedTenantIsIsolatedAndRetriedInFull(t *testing.T) {
	e := setup(t)
	fill(t, poolOf(t, e, "a"), "a", 5)
	fill(t, poolOf(t, e, "b"), "b", 5)
	if err := e.cp.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	stamp := testutil.ToFloat64(e.cp.lastFull)
	if stamp == 0 {
		t.Fatal("last full success timestamp not set after a clean round")
	}
	// Each tenant's failure counter exists from its first round, at 0: an
	// alert on its increase sees the first failure.
	if n, got := testutil.CollectAndCount(e.cp.failures), testutil.ToFloat64(e.cp.failures.WithLabelValues("a")); n != 2 || got != 0 {
		t.Fatalf("after a clean round: %d failure series, a's at %v; want 2 series at 0", n, got)
	}
	e.st.fail["a"] = true
	if _, err := poolOf(t, e, "a").Report(pool.Report{Resource: "a001", Context: "x", Outcome: pool.Success}); err != nil {
		t.Fatal(err)
	}
	if _, err := poolOf(t, e, "b").Report(pool.Report{Resource: "b001", Context: "z", Outcome: pool.Success}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	err := e.cp.Round(context.Background())
	if err == nil || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Round() with a failing tenant = %v, want its error", err)
	}
	if got := testutil.ToFloat64(e.cp.lastFull); got != stamp {
		t.Fatalf("last full success timestamp moved to %v on a round with a failure", got)
	}
	if cp := e.st.last("b"); cp.Full || len(cp.Cells) != 1 {
		t.Fatalf("b's checkpoint full=%v cells=%d, want its incremental change written despite a's failure", cp.Full, len(cp.Cells))
	}
	e.st.fail["a"] = false
	if err := e.cp.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if cp := e.st.last("a"); !cp.Full {
		t.Fatal("a's checkpoint after a failure is incremental, want full (the lost change set must be written)")
	}
	if got := testutil.ToFloat64(e.cp.lastFull); got <= stamp {
		t.Fatalf("last full success timestamp %v not advanced after a clean round", got)
	}
	if got := testutil.ToFloat64(e.cp.failures.WithLabelValues("a")); got != 1 {
		t.Fatalf("a's failures = %v, want 1", got)
	}
	e.cp.Forget("a")
	if n := testutil.CollectAndCount(e.cp.failures); n != 1 {
		t.Fatalf("%d failure series after a is forgotten, want 1 (b's)", n)
	}
}

func TestCorruptTenantSkippedOthersServed(t *testing.T) {
	e := setup(t)
	fill(t, poolOf(t, e, "a"), "a", 5)
	fill(t, poolOf(t, e, "b"), "b", 5)
	if err := e.cp.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", e.path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE resources SET capacity = 0 WHERE pool_id = 'a' AND id = 'a002'`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	r := open(t, e.path)
	failed, err := r.cp.RestoreAll(context.Background())
	if err != nil || failed != 1 {
		t.Fatalf("RestoreAll() = %d, %v; want 1 failure", failed, err)
	}
	if got := testutil.ToFloat64(r.cp.restoreFailures); got != 1 {
		t.Fatalf("repool_restore_failures_total = %v, want 1", got)
	}
	b := poolOf(t, r, "b")
	if !b.HasResource("b004") {
		t.Fatal("b not restored next to a corrupt a")
	}
	if _, err := b.Acquire("x", time.Minute, nil); err != nil {
		t.Fatalf("b Acquire after restore = %v", err)
	}
}

// TestHangingTenantFailsAlone: a tenant whose checkpoint write hangs fails
// after TenantTimeout, and the others of the round are written.
func TestHangingTenantFailsAlone(t *testing.T) {
	e := setup(t)
	e.cp.cfg.TenantTimeout = time.Second // a's write hangs until then; b's three resources take far less, also on a busy machine
	fill(t, poolOf(t, e, "a"), "a", 3)
	fill(t, poolOf(t, e, "b"), "b", 3)
	e.st.mu.Lock()
	e.st.stall["a"] = true
	e.st.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- e.cp.Round(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Round() with tenant a hanging = %v, want a's deadline exceeded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Round() did not return within 10s of a tenant hanging")
	}
	if got := e.st.last("b"); len(got.Resources) != 3 {
		t.Fatalf("tenant b's checkpoint = %d resources, want 3: written despite a hanging", len(got.Resources))
	}
}

// TestCorruptTenantKeepsItsStoredState: a tenant whose stored rows the
// pool refuses gets no pool at restore, so the next round does not
// checkpoint an empty pool over those rows: they stay for an operator to
// repair.
func TestCorruptTenantKeepsItsStoredState(t *testing.T) {
	e := setup(t)
	fill(t, poolOf(t, e, "a"), "a", 5)
	if err := e.cp.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", e.path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// A capacity the store keeps but the pool refuses.
	if _, err := db.Exec(`UPDATE resources SET capacity = 2000000 WHERE pool_id = 'a' AND id = 'a002'`); err != nil {
		t.Fatal(err)
	}
	r := open(t, e.path)
	if failed, err := r.cp.RestoreAll(context.Background()); err != nil || failed != 1 {
		t.Fatalf("RestoreAll() = %d, %v; want 1 failure", failed, err)
	}
	if _, ok := r.pools.Lookup("a"); ok {
		t.Fatal("after a skipped restore tenant a has a pool, which the next round would checkpoint empty")
	}
	if err := r.cp.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM resources WHERE pool_id = 'a'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 5 {
		t.Fatalf("stored resources of the skipped tenant after a round = %d, want 5", n)
	}
}

// TestWithLeasesKeepsEveryJournaledLease: the journal may hold leases that
// ended (which ones is not known), so every unexpired lease of a known
// resource is restored, beyond its capacity if need be; a stale one left in
// place of a live one would let the resource be leased twice.
func TestWithLeasesKeepsEveryJournaledLease(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := pool.Snapshot{Resources: []pool.ResourceState{{ID: "r1", Capacity: 1}}}
	stale := store.LeaseRow{ID: 1<<40 | 1, ResourceID: "r1", Context: "x", Token: 1<<40 | 1, ExpiresAt: now.Add(10 * time.Second).UnixNano()}
	live := store.LeaseRow{ID: 1<<40 | 2, ResourceID: "r1", Context: "x", Token: 1<<40 | 2, ExpiresAt: now.Add(time.Minute).UnixNano()}
	expired := store.LeaseRow{ID: 1<<40 | 3, ResourceID: "r1", Context: "x", Token: 1<<40 | 3, ExpiresAt: now.UnixNano()}
	removed := store.LeaseRow{ID: 1<<40 | 4, ResourceID: "gone", Context: "x", Token: 1<<40 | 4, ExpiresAt: now.Add(time.Minute).UnixNano()}
	got := withLeases(s, []store.LeaseRow{stale, live, expired, removed}, now)
	var ids []uint64
	for _, l := range got.Leases {
		ids = append(ids, l.ID)
	}
	if len(ids) != 2 || ids[0] != stale.ID || ids[1] != live.ID {
		t.Fatalf("withLeases kept leases %v, want the stale and the live one (%d, %d)", ids, stale.ID, live.ID)
	}
	if got.LastLease < removed.ID || got.LastToken < removed.Token {
		t.Fatalf("high-water marks %d/%d, want at least every journaled lease's (%d)", got.LastLease, got.LastToken, removed.ID)
	}
	p, err := pool.New(pool.Config{Clock: clock.NewFake(now)})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Restore(got); err != nil {
		t.Fatalf("Restore(both leases of a capacity-1 resource) = %v", err)
	}
	if l, err := p.Acquire("x", time.Minute, nil); !errors.Is(err, pool.ErrExhausted) {
		t.Fatalf("Acquire() with the live lease restored = %+v, %v; want ErrExhausted", l, err)
	}
}

// TestUnreadableTenantFailsTheRestore: a tenant whose rows cannot be read
// now (the store unreachable) is not skipped like a corrupt one, since its
// first full checkpoint would then overwrite what is stored: RestoreAll
// fails, and a later restore gets everything back.
func TestUnreadableTenantFailsTheRestore(t *testing.T) {
	e := setup(t)
	fill(t, poolOf(t, e, "a"), "a", 5)
	fill(t, poolOf(t, e, "b"), "b", 5)
	if err := e.cp.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := open(t, e.path)
	r.st.failLoad["a"] = true
	if _, err := r.cp.RestoreAll(context.Background()); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("RestoreAll() with tenant a unreadable = %v, want an error wrapping ErrUnavailable", err)
	}
	if got := testutil.ToFloat64(r.cp.restoreFailures); got != 0 {
		t.Fatalf("repool_restore_failures_total = %v, want 0 (not corrupt)", got)
	}
	r2 := open(t, e.path)
	if failed, err := r2.cp.RestoreAll(context.Background()); err != nil || failed != 0 {
		t.Fatalf("RestoreAll() once readable = %d, %v", failed, err)
	}
	if a := poolOf(t, r2, "a"); !a.HasResource("a004") {
		t.Fatal("tenant a lost its resources after an unreadable restore")
	}
}

// TestPersistDoesNotWaitForOtherTenants: a registration's synchronous write
// for one tenant is not held up by a slow checkpoint of another.
func TestPersistDoesNotWaitForOtherTenants(t *testing.T) {
	e := setup(t)
	fill(t, poolOf(t, e, "a"), "a", 5)
	fill(t, poolOf(t, e, "b"), "b", 5)
	slow := make(chan struct{})
	e.st.mu.Lock()
	e.st.hold["a"] = slow
	e.st.mu.Unlock()
	round := make(chan error, 1)
	go func() { round <- e.cp.Round(context.Background()) }()
	testenv.Eventually(t, 5*time.Second, "the round to reach tenant a's write", func() bool {
		e.st.mu.Lock()
		defer e.st.mu.Unlock()
		_, started := e.st.saved["a"]
		return started
	})
	done := make(chan error, 1)
	go func() {
		done <- e.cp.Persist(context.Background(), "b", poolOf(t, e, "b").States([]string{"b001"}), nil)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Persist for tenant b waited for tenant a's checkpoint")
	}
	close(slow)
	if err := <-round; err != nil {
		t.Fatal(err)
	}
}

// TestPersistGroupCommits: many concurrent registrations and removals of
// one tenant are all durable when acknowledged, written in fewer
// transactions than calls while a write is in flight, and a removal
// acknowledged after its registration leaves the resource removed.
func TestPersistGroupCommits(t *testing.T) {
	e := setup(t)
	p := poolOf(t, e, "a")
	slow := make(chan struct{})
	e.st.mu.Lock()
	e.st.hold["a"] = slow // the first write waits: the others queue behind it
	e.st.mu.Unlock()
	const callers = 32
	var wg sync.WaitGroup
	errs := make(chan error, 2*callers+1)
	// A first write, held: every caller after it queues for the next one.
	if _, _, err := p.Register([]pool.Spec{{ID: "first", Capacity: 1}}); err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { errs <- e.cp.Persist(context.Background(), "a", p.States([]string{"first"}), nil) })
	testenv.Eventually(t, 10*time.Second, "the first write to be held", func() bool {
		e.st.mu.Lock()
		defer e.st.mu.Unlock()
		return e.st.writes["a"] == 1
	})
	for i := range callers {
		id := fmt.Sprintf("r%03d", i)
		if _, _, err := p.Register([]pool.Spec{{ID: id, Capacity: 1}}); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if err := e.cp.Persist(context.Background(), "a", p.States([]string{id}), nil); err != nil {
				errs <- err
				return
			}
			if i%2 == 0 { // then removed, in a later call
				errs <- e.cp.Persist(context.Background(), "a", nil, []string{id})
			}
		})
	}
	g := e.cp.group("a")
	testenv.Eventually(t, 10*time.Second, "every caller to queue behind the held write", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.next) == callers
	})
	close(slow)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Persist() = got error %v, want nil", err)
		}
	}
	st, err := e.st.LoadCheckpoint(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, r := range st.Resources {
		got[r.ID] = true
	}
	for i := range callers {
		id := fmt.Sprintf("r%03d", i)
		if want := i%2 == 1; got[id] != want {
			t.Errorf("stored %s = got %v, want %v (registered, then removed if even)", id, got[id], want)
		}
	}
	e.st.mu.Lock()
	writes := e.st.writes["a"]
	e.st.mu.Unlock()
	// The held write, one for the 32 registrations, and the removals
	// (each sent after its own registration was answered).
	if writes > 2+callers/2 {
		t.Errorf("transactions for 1 + %d Persist calls = got %d, want at most %d (the %d queued registrations in one)", callers+callers/2, writes, 2+callers/2, callers)
	}
}

// TestRunCheckpointsEveryInterval: Run writes a round at each interval of
// the checkpointer's clock, a round in which the tenant changed nothing
// writes nothing, and Run returns when its context ends.
func TestRunCheckpointsEveryInterval(t *testing.T) {
	e := setup(t)
	p := poolOf(t, e, "a")
	fill(t, p, "a", 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); e.cp.Run(ctx, time.Minute) }()
	writes := func() int {
		e.st.mu.Lock()
		defer e.st.mu.Unlock()
		return e.st.writes["a"]
	}
	if err := e.clock.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got := writes(); got != 0 {
		t.Fatalf("checkpoint writes before the first interval = got %d, want 0", got)
	}
	for round := 1; round <= 3; round++ {
		if round > 1 {
			if _, err := p.Report(pool.Report{Resource: "a000", Context: "x", Outcome: pool.Outcome(1)}); err != nil {
				t.Fatal(err)
			}
		}
		e.clock.Advance(time.Minute)
		testenv.Eventually(t, 10*time.Second, fmt.Sprintf("checkpoint round %d", round), func() bool { return writes() == round })
	}
	// An idle round: once Run waits for the next interval again, nothing
	// more was written.
	if err := e.clock.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	if err := e.clock.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got := writes(); got != 3 {
		t.Fatalf("checkpoint writes after a round without changes = got %d, want 3 (an idle tenant is not written)", got)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of its context ending")
	}
}
