package storetest

import (
	"errors"
	"slices"
	"testing"

	"github.com/repool/repool/internal/store"
)

// testCheckpointBindings: affinity bindings are written whole by a Full
// checkpoint and by an incremental one that says they changed, kept by
// one that does not, and a bad binding is refused naming it.
func testCheckpointBindings(t *testing.T, h *harness) {
	h.tenant(t, "t1")
	full := store.Checkpoint{Full: true, FencingHWM: 7,
		Resources: []store.ResourceRow{{ID: "r1", Capacity: 1}, {ID: "r2", Capacity: 1}},
		Bindings: []store.BindingRow{
			{Context: "login", Key: "alice", ResourceID: "r1", ExpiresAt: 1_000},
			{Context: "login", Key: "bob", ResourceID: "r2", ExpiresAt: 2_000, Failed: true},
		}}
	h.save(t, "t1", full)
	if got := h.load(t, "t1").Bindings; !slices.Equal(got, full.Bindings) {
		t.Fatalf("bindings after a Full checkpoint = %+v, want %+v", got, full.Bindings)
	}
	h.save(t, "t1", store.Checkpoint{FencingHWM: 8, Cells: []store.CellRow{{ResourceID: "r1", Context: "login"}}})
	if got := h.load(t, "t1").Bindings; !slices.Equal(got, full.Bindings) {
		t.Fatalf("bindings after an incremental checkpoint without them = %+v, want them kept", got)
	}
	moved := []store.BindingRow{{Context: "login", Key: "alice", ResourceID: "r2", ExpiresAt: 3_000}}
	h.save(t, "t1", store.Checkpoint{FencingHWM: 9, Bindings: moved, BindingsChanged: true})
	if got := h.load(t, "t1").Bindings; !slices.Equal(got, moved) {
		t.Fatalf("bindings after they changed = %+v, want %+v", got, moved)
	}
	h.save(t, "t1", store.Checkpoint{FencingHWM: 10, BindingsChanged: true})
	if got := h.load(t, "t1").Bindings; len(got) != 0 {
		t.Fatalf("bindings after all were dropped = %+v, want none", got)
	}
	bad := store.Checkpoint{FencingHWM: 11, BindingsChanged: true,
		Bindings: []store.BindingRow{{Context: "login", Key: "", ResourceID: "r1"}}}
	if err := h.s.SaveCheckpoint(t.Context(), "t1", bad); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("SaveCheckpoint(binding with an empty key) = %v, want ErrInvalid", err)
	}
}
