package audit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/testenv"
)

type memStore struct {
	mu      sync.Mutex
	entries []store.AuditEntry
}

func (m *memStore) AppendAudit(_ context.Context, e store.AuditEntry) (store.AuditEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entries = append(m.entries, e)
	return e, nil
}

func (m *memStore) snapshot() []store.AuditEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]store.AuditEntry(nil), m.entries...)
}

func TestWatchRecordsBlocksAndRecoveries(t *testing.T) {
	st := &memStore{}
	w, err := New(st, 16, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx, time.Second); close(done) }()
	p, _ := pool.New(pool.Config{FailuresToQuarantine: 1})
	if _, _, err := p.Register([]pool.Spec{{ID: "r"}}); err != nil {
		t.Fatal(err)
	}
	w.Watch(ctx, "acme", p)
	if _, err := p.Report(pool.Report{Resource: "r", Context: "x", Outcome: pool.Failure}); err != nil {
		t.Fatal(err)
	}
	w.Record(store.AuditEntry{TenantID: "acme", Actor: "key:k", Action: "resources.register"})
	testenv.Eventually(t, 5*time.Second, "a block and a registration to be written", func() bool { return len(st.snapshot()) >= 2 })
	cancel()
	<-done
	got := st.snapshot()
	if len(got) != 2 {
		t.Fatalf("entries = %+v, want a block and a registration", got)
	}
	var blocked bool
	for _, e := range got {
		if e.Action == "resource.blocked" && e.TenantID == "acme" && e.Target == "r/x" {
			blocked = true
		}
	}
	if !blocked {
		t.Fatalf("entries = %+v, want resource.blocked for r/x", got)
	}
}

func TestFullQueueDrops(t *testing.T) {
	w, _ := New(&memStore{}, 1, nil, nil)
	w.Record(store.AuditEntry{TenantID: "a", Action: "x"})
	w.Record(store.AuditEntry{TenantID: "a", Action: "y"}) // queue full, no Run
	if got := len(w.queue); got != 1 {
		t.Fatalf("queue holds %d, want 1", got)
	}
	if got := testutil.ToFloat64(w.dropped); got != 1 {
		t.Fatalf("repool_audit_dropped_total = %v, want 1", got)
	}
}

func TestWatchRecordsRetirements(t *testing.T) {
	st := &memStore{}
	w, err := New(st, 16, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx, time.Second); close(done) }()
	p, _ := pool.New(pool.Config{})
	if _, _, err := p.Register([]pool.Spec{{ID: "r", MaxUses: 1}}); err != nil {
		t.Fatal(err)
	}
	w.Watch(ctx, "acme", p)
	if _, err := p.Acquire("x", time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the retirement to be written", func() bool { return len(st.snapshot()) >= 1 })
	cancel()
	<-done
	got := st.snapshot()
	if len(got) != 1 || got[0].Action != "resource.retired" || got[0].Target != "r" || got[0].Detail != "max_uses 1 reached" {
		t.Fatalf("entries = %+v, want resource.retired of r", got)
	}
}
