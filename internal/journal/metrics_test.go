package journal

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/store"
)

// TestCommitDurationObserved: each batch's commit is timed once in
// repool_lease_journal_commit_seconds, a commit that waits for the store
// in a bucket above the wait.
func TestCommitDurationObserved(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	gate, entered := make(chan struct{}), make(chan struct{})
	st := &memJournal{rows: map[uint64]store.LeaseRow{}, gate: gate}
	w, err := New(storeFunc(func(ctx context.Context, tenant string, put []store.LeaseRow, del []uint64) error {
		close(entered)
		return st.WriteLeases(ctx, tenant, put, del)
	}), 5*time.Second, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.Start(ctx)
	done := make(chan error, 1)
	go func() {
		done <- w.Leased(context.Background(), "t", pool.Lease{ID: 1, Resource: "r", Context: "c", Token: 1, ExpiresAt: time.Unix(0, 1)})
	}()
	<-entered
	// The commit waits at the gate for 20 ms: its duration is at least
	// that (the sleep is the store's latency this test simulates).
	time.Sleep(20 * time.Millisecond)
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var m dto.Metric
	if err := w.commits.Write(&m); err != nil {
		t.Fatal(err)
	}
	h := m.GetHistogram()
	if h.GetSampleCount() != 1 || h.GetSampleSum() < 0.02 {
		t.Fatalf("commit histogram: %d samples summing to %v s, want 1 of at least 0.02 s", h.GetSampleCount(), h.GetSampleSum())
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	if len(names) != 2 || names[0] != "repool_lease_journal_batch_size" || names[1] != "repool_lease_journal_commit_seconds" {
		t.Fatalf("registered %v, want the batch size and the commit duration", names)
	}
}
