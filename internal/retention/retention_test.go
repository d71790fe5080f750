package retention

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/sqlite"
)

// shipped is the server's default policy (server.Config: 30 days of
// audit entries, 100,000 per tenant, revoked keys for 30 days).
var shipped = Policy{AuditMaxAge: 30 * 24 * time.Hour, AuditMaxRows: 100_000, RevokedKeyMaxAge: 30 * 24 * time.Hour}

// recorder counts the rows each PruneAudit call deleted, and fails the
// prunes of one tenant when told to.
type recorder struct {
	Store
	mu     sync.Mutex
	calls  map[string][]int64
	failOn string
}

func (r *recorder) PruneAudit(ctx context.Context, tenant string, p store.AuditPrune) (int64, error) {
	if tenant == r.failOn {
		return 0, fmt.Errorf("prune audit of tenant %q: %w", tenant, store.ErrUnavailable)
	}
	n, err := r.Store.PruneAudit(ctx, tenant, p)
	r.mu.Lock()
	if r.calls == nil {
		r.calls = map[string][]int64{}
	}
	r.calls[tenant] = append(r.calls[tenant], n)
	r.mu.Unlock()
	return n, err
}

type harness struct {
	st  *sqlite.Store
	rec *recorder
	clk *clock.Fake
	reg *prometheus.Registry
	p   *Pruner
}

func newHarness(t *testing.T, pol Policy) *harness {
	t.Helper()
	clk := clock.NewFake(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))
	st, err := sqlite.Open(t.Context(), sqlite.Memory, store.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := &harness{st: st, rec: &recorder{Store: st}, clk: clk, reg: prometheus.NewRegistry()}
	if h.p, err = New(Config{Store: h.rec, Policy: pol, Clock: clk, Metrics: h.reg}); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *harness) tenant(t *testing.T, id string) {
	t.Helper()
	if _, err := h.st.CreateTenant(t.Context(), store.Tenant{ID: id, Name: id}); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) audit(t *testing.T, tenant string, n int) {
	t.Helper()
	for i := range n {
		if _, err := h.st.AppendAudit(t.Context(), store.AuditEntry{TenantID: tenant, Actor: "pool", Action: "resource.blocked", Target: fmt.Sprintf("r%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
}

func (h *harness) count(t *testing.T, tenant string) int {
	t.Helper()
	n := 0
	for before := int64(0); ; {
		page, err := h.st.ListAudit(t.Context(), tenant, store.MaxAuditLimit, before)
		if err != nil {
			t.Fatal(err)
		}
		n += len(page)
		if len(page) < store.MaxAuditLimit {
			return n
		}
		before = page[len(page)-1].ID
	}
}

// round runs one round, advancing the fake clock past each pause between
// batches as the pruner arms it (the pruner's timers are the only ones on
// the clock).
func (h *harness) round(t *testing.T) (Result, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		for h.clk.Wait(ctx, 1) == nil {
			h.clk.Advance(h.p.cfg.Policy.Pause)
		}
	})
	res, err := h.p.Round(ctx)
	cancel()
	wg.Wait()
	return res, err
}

func TestRoundByAge(t *testing.T) {
	h := newHarness(t, shipped)
	h.tenant(t, "a")
	h.tenant(t, "b")
	// One entry a day for 40 days, for each tenant, at midnight; a key
	// revoked on day 5 and one on day 35.
	for day := range 40 {
		h.audit(t, "a", 1)
		h.audit(t, "b", 1)
		if day == 5 || day == 35 {
			id := fmt.Sprintf("k%d", day)
			d := sha256.Sum256([]byte(id))
			if _, err := h.st.CreateKey(t.Context(), store.Key{ID: id, TenantID: "a", Name: id, Prefix: "rpk_", Digest: d[:]}); err != nil {
				t.Fatal(err)
			}
			if err := h.st.RevokeKey(t.Context(), "a", id); err != nil {
				t.Fatal(err)
			}
		}
		h.clk.Advance(24 * time.Hour)
	}
	// Now is noon of day 39: the entries of days 0..9 are older than 30
	// days (the pauses between batches move the clock by milliseconds).
	h.clk.Advance(-12 * time.Hour)
	res, err := h.round(t)
	if err != nil || res.Audit != 20 || res.RevokedKeys != 1 {
		t.Fatalf("Round = got %+v, %v, want 20 audit entries (10 a tenant) and 1 revoked key deleted", res, err)
	}
	for _, tenant := range []string{"a", "b"} {
		if n := h.count(t, tenant); n != 30 {
			t.Fatalf("%s's audit entries after the round = got %d, want the 30 of the last 30 days", tenant, n)
		}
	}
	if keys, err := h.st.ListKeys(t.Context(), "a"); err != nil || len(keys) != 1 || keys[0].ID != "k35" {
		t.Fatalf("a's keys after the round = got %+v, %v, want k35 only (revoked 5 days ago)", keys, err)
	}
	if res, err := h.round(t); err != nil || res.Audit != 0 || res.RevokedKeys != 0 {
		t.Fatalf("a second Round = got %+v, %v, want nothing deleted", res, err)
	}
}

func TestRoundByRowsInBatches(t *testing.T) {
	pol := shipped
	pol.AuditMaxRows = 1000 // scaled down from 100,000; the batch is the default 1000
	h := newHarness(t, pol)
	h.tenant(t, "a")
	h.tenant(t, "b")
	h.audit(t, "a", 2500)
	h.audit(t, "b", 999)
	res, err := h.round(t)
	if err != nil || res.Audit != 1500 {
		t.Fatalf("Round = got %+v, %v, want 1500 audit entries deleted", res, err)
	}
	if want := []int64{1000, 500}; fmt.Sprint(h.rec.calls["a"]) != fmt.Sprint(want) {
		t.Fatalf("rows deleted by each PruneAudit of a = got %v, want %v (batches of %d)", h.rec.calls["a"], want, DefaultBatch)
	}
	if a, b := h.count(t, "a"), h.count(t, "b"); a != 1000 || b != 999 {
		t.Fatalf("entries after the round = got a %d, b %d, want 1000 and 999", a, b)
	}
	newest, err := h.st.ListAudit(t.Context(), "a", 1, 0)
	if err != nil || newest[0].Target != "r2499" {
		t.Fatalf("a's newest entry = got %+v, %v, want r2499 kept", newest, err)
	}
	if got := testutil.ToFloat64(h.p.pruned.WithLabelValues("audit")); got != 1500 {
		t.Fatalf("repool_retention_pruned_rows_total{kind=audit} = got %v, want 1500", got)
	}
}

func TestRoundMetrics(t *testing.T) {
	h := newHarness(t, shipped)
	h.tenant(t, "a")
	h.audit(t, "a", 50)
	if _, err := h.round(t); err != nil {
		t.Fatal(err)
	}
	u, err := h.st.Usage(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{
		"repool_store_audit_rows":                         50,
		"repool_store_size_bytes":                         float64(u.Bytes),
		"repool_retention_last_success_timestamp_seconds": float64(h.clk.Now().Unix()),
		"repool_retention_failures_total":                 0,
	} {
		var got float64
		mfs, err := h.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, mf := range mfs {
			if mf.GetName() == name {
				m := mf.GetMetric()[0]
				got, found = m.GetGauge().GetValue()+m.GetCounter().GetValue(), true
			}
		}
		if !found || got != want {
			t.Fatalf("%s = got %v (present %v), want %v", name, got, found, want)
		}
	}
	if n, err := testutil.GatherAndCount(h.reg, "repool_retention_pruned_rows_total"); err != nil || n != 2 {
		t.Fatalf("repool_retention_pruned_rows_total series = got %d, %v, want 2 (audit, revoked_keys) from the start", n, err)
	}
}

func TestRoundGoesOnAfterATenantFails(t *testing.T) {
	pol := shipped
	pol.AuditMaxRows = 10
	h := newHarness(t, pol)
	for _, id := range []string{"a", "b", "c"} {
		h.tenant(t, id)
		h.audit(t, id, 15)
	}
	h.rec.failOn = "b"
	res, err := h.round(t)
	if !errors.Is(err, store.ErrUnavailable) || res.Audit != 10 {
		t.Fatalf("Round with b failing = got %+v, %v, want 10 deleted (a's and c's 5) and b's error", res, err)
	}
	if a, b, c := h.count(t, "a"), h.count(t, "b"), h.count(t, "c"); a != 10 || b != 15 || c != 10 {
		t.Fatalf("entries = got a %d b %d c %d, want 10 15 10", a, b, c)
	}
	if got := testutil.ToFloat64(h.p.failures); got != 1 {
		t.Fatalf("repool_retention_failures_total = got %v, want 1", got)
	}
	if got := testutil.ToFloat64(h.p.lastSuccess); got != 0 {
		t.Fatalf("repool_retention_last_success_timestamp_seconds = got %v, want 0 (no round succeeded)", got)
	}
}

func TestNewRefusesABadBatch(t *testing.T) {
	for _, batch := range []int{-1, store.MaxPruneBatch + 1} {
		if _, err := New(Config{Store: &recorder{}, Policy: Policy{Batch: batch}}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("New(batch %d) = got error %v, want ErrInvalid", batch, err)
		}
	}
}
