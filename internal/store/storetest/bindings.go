package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/repool/repool/internal/store"
)

// testCheckpointBindings: affinity bindings are replaced by a Full
// checkpoint, kept by an incremental one that does not name them, deleted
// (Unbound) and upserted by an incremental one that does, in that order;
// deleted with their tenant; and a bad one is refused naming it.
func testCheckpointBindings(t *testing.T, h *harness) {
	h.tenant(t, "t1")
	full := store.Checkpoint{Full: true, FencingHWM: 7,
		Resources: []store.ResourceRow{{ID: "r1", Capacity: 1}, {ID: "r2", Capacity: 1}},
		Bindings: []store.BindingRow{
			{Context: "login", Key: "alice", ResourceID: "r1", ExpiresAt: 1_000},
			{Context: "login", Key: "bob", ResourceID: "r2", ExpiresAt: 2_000, Failed: true},
		}}
	for i := range 250 { // more than one statement's batch
		full.Bindings = append(full.Bindings, store.BindingRow{Context: "x", Key: fmt.Sprintf("k%03d", i), ResourceID: "r1", ExpiresAt: 5})
	}
	h.save(t, "t1", full)
	if got := h.load(t, "t1").Bindings; !slices.Equal(got, full.Bindings) {
		t.Fatalf("bindings after a Full checkpoint = %d rows, want the %d written", len(got), len(full.Bindings))
	}
	h.save(t, "t1", store.Checkpoint{FencingHWM: 8, Cells: []store.CellRow{{ResourceID: "r1", Context: "login"}}})
	if got := h.load(t, "t1").Bindings; !slices.Equal(got, full.Bindings) {
		t.Fatalf("bindings after an incremental checkpoint without them = %d rows, want them kept", len(got))
	}
	var unbound []store.BindingKey
	for i := range 250 {
		unbound = append(unbound, store.BindingKey{Context: "x", Key: fmt.Sprintf("k%03d", i)})
	}
	unbound = append(unbound, store.BindingKey{Context: "login", Key: "alice"}, store.BindingKey{Context: "login", Key: "bob"}, store.BindingKey{Context: "no", Key: "such"})
	moved := []store.BindingRow{{Context: "login", Key: "alice", ResourceID: "r2", ExpiresAt: 3_000}}
	h.save(t, "t1", store.Checkpoint{FencingHWM: 9, Bindings: moved, Unbound: unbound})
	if got := h.load(t, "t1").Bindings; !slices.Equal(got, moved) {
		t.Fatalf("bindings after 252 unbound and alice bound again = %+v, want %+v", got, moved)
	}
	again := []store.BindingRow{{Context: "login", Key: "alice", ResourceID: "r1", ExpiresAt: 4_000, Failed: true}}
	h.save(t, "t1", store.Checkpoint{FencingHWM: 10, Bindings: again})
	if got := h.load(t, "t1").Bindings; !slices.Equal(got, again) {
		t.Fatalf("bindings after alice's upsert = %+v, want %+v", got, again)
	}
	bad := store.Checkpoint{FencingHWM: 11, Bindings: []store.BindingRow{{Context: "login", Key: "", ResourceID: "r1"}}}
	if err := h.s.SaveCheckpoint(t.Context(), "t1", bad); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("SaveCheckpoint(binding with an empty key) = %v, want ErrInvalid", err)
	}
	if err := h.s.DeleteTenant(t.Context(), "t1"); err != nil {
		t.Fatal(err)
	}
	if n := h.counts(t, "t1")["affinity_bindings"]; n != 0 {
		t.Fatalf("%d affinity_bindings rows left after the tenant's delete, want none", n)
	}
}
