package tenants

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/store"
)

// groupStore stands in for the store of a sharded deployment: tenants'
// records and placements, the groups, and the fenced handover, whose
// answer a test sets (moveErr).
type groupStore struct {
	noLimits
	mu      sync.Mutex
	placed  map[string]string // tenant → group
	groups  []store.GroupInfo
	moveErr error
	moves   []string
}

func (g *groupStore) GetTenant(_ context.Context, id string) (store.Tenant, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	grp, ok := g.placed[id]
	if !ok {
		return store.Tenant{}, fmt.Errorf("tenant %q: %w", id, store.ErrNotFound)
	}
	return store.Tenant{ID: id, Group: grp, Status: store.StatusActive}, nil
}

func (g *groupStore) GroupList(context.Context) ([]store.GroupInfo, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.groups, nil
}

func (g *groupStore) MoveTenant(_ context.Context, tenant, to string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.moveErr != nil {
		return g.moveErr
	}
	g.placed[tenant] = to
	g.moves = append(g.moves, tenant+"→"+to)
	return nil
}

// stateStore stands in for the checkpointer: Save keeps a pool's
// resources, Restore admits the tenant with what was saved.
type stateStore struct {
	recorder
	pools *Registry
	mu    sync.Mutex
	saved map[string][]pool.ResourceInfo
	saves int
}

func (s *stateStore) Save(_ context.Context, tenant string) error {
	p, ok := s.pools.Lookup(tenant)
	if !ok {
		return nil
	}
	infos, _ := p.List("", 1000)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.saved[tenant] = infos
	s.saves++
	return nil
}

func (s *stateStore) Restore(_ context.Context, tenant string) error {
	s.mu.Lock()
	infos := s.saved[tenant]
	s.mu.Unlock()
	return s.pools.Admit(tenant, func(p *pool.Pool) error {
		specs := make([]pool.Spec, len(infos))
		for i, r := range infos {
			specs[i] = pool.Spec{ID: r.ID}
		}
		_, _, err := p.Register(specs)
		return err
	})
}

type moveCounts struct {
	mu            sync.Mutex
	moved, failed int
}

func (m *moveCounts) Moved(time.Duration) { m.mu.Lock(); m.moved++; m.mu.Unlock() }
func (m *moveCounts) Failed()             { m.mu.Lock(); m.failed++; m.mu.Unlock() }

// sharded returns the lifecycle of group g1's active server, serving
// tenant "a" with two resources, beside a live group g2, a draining
// group g3 and a group g4 with no server.
func sharded(t *testing.T) (*Lifecycle, *groupStore, *stateStore, *moveCounts) {
	t.Helper()
	gs := &groupStore{placed: map[string]string{"a": "g1", "b": "g2"}, groups: []store.GroupInfo{
		{Name: "g1", State: store.GroupActive, Live: true},
		{Name: "g2", State: store.GroupActive, Live: true},
		{Name: "g3", State: store.GroupDraining, Live: true},
		{Name: "g4", State: store.GroupActive},
	}}
	cps := &stateStore{saved: map[string][]pool.ResourceInfo{}}
	mc := &moveCounts{}
	cfg := testConfig(t, &cps.recorder)
	cfg.Store, cfg.Handover, cfg.Group, cfg.Moves = gs, gs, "g1", mc
	cfg.Checkpoints = cps
	cps.pools = cfg.Pools
	lc, err := NewLifecycle(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if done := lc.SyncPlacements(t.Context(), gs.placed); !done {
		t.Fatal("SyncPlacements left something undone")
	}
	p, err := lc.Pools().Pool("a")
	if err != nil {
		t.Fatalf("tenant a, placed on g1, not served after SyncPlacements: %v", err)
	}
	if _, _, err := p.Register([]pool.Spec{{ID: "r1"}, {ID: "r2"}}); err != nil {
		t.Fatal(err)
	}
	return lc, gs, cps, mc
}

func elsewhere(t *testing.T, err error) string {
	t.Helper()
	var e *ElsewhereError
	if !errors.As(err, &e) {
		t.Fatalf("err = %v, want an *ElsewhereError", err)
	}
	return e.Group
}

// TestSyncPlacementsServesOnlyThisGroup: a tenant placed on the group is
// taken in, one placed elsewhere is refused naming its group, one served
// here but placed elsewhere is let go, and a deleted one is forgotten.
func TestSyncPlacementsServesOnlyThisGroup(t *testing.T) {
	lc, gs, _, _ := sharded(t)
	if g := elsewhere(t, lc.Pools().Serves("b")); g != "g2" {
		t.Fatalf("tenant b refused naming %q, want g2", g)
	}
	if _, err := lc.Pools().Pool("x"); elsewhere(t, err) != "" {
		t.Fatal("a tenant the placements never named is refused naming a group")
	}
	// a is placed on g2 now (another server moved it), b deleted.
	placed := map[string]string{"a": "g2"}
	gs.placed = placed
	if done := lc.SyncPlacements(t.Context(), placed); !done {
		t.Fatal("SyncPlacements left something undone")
	}
	if g := elsewhere(t, lc.Pools().Serves("a")); g != "g2" {
		t.Fatalf("tenant a, placed on g2, refused naming %q", g)
	}
	if _, ok := lc.Pools().Elsewhere("b"); ok {
		t.Fatal("a deleted tenant is still remembered as served elsewhere")
	}
}

// TestMoveOutHandsTheTenantOver: the tenant's state is saved before the
// store moves it, its calls are refused naming the target from then on,
// and the move is counted.
func TestMoveOutHandsTheTenantOver(t *testing.T) {
	lc, gs, cps, mc := sharded(t)
	if _, err := lc.MoveOut(t.Context(), "a", "g2"); err != nil {
		t.Fatalf("MoveOut(a → g2) = %v", err)
	}
	if cps.saves != 1 || len(cps.saved["a"]) != 2 {
		t.Fatalf("saved %d times, %d resources; want once, both", cps.saves, len(cps.saved["a"]))
	}
	if len(gs.moves) != 1 || gs.placed["a"] != "g2" {
		t.Fatalf("store moves %v, a placed on %q", gs.moves, gs.placed["a"])
	}
	if _, err := lc.Pools().Pool("a"); elsewhere(t, err) != "g2" {
		t.Fatal("a moved tenant is not refused naming its new group")
	}
	if _, forgot, _ := cps.seen(); len(forgot) == 0 || forgot[len(forgot)-1] != "a" {
		t.Fatalf("the checkpointer was not told to forget the moved tenant (forgot %v)", forgot)
	}
	if mc.moved != 1 || mc.failed != 0 {
		t.Fatalf("counted %d moved, %d failed; want 1, 0", mc.moved, mc.failed)
	}
}

// TestMoveOutRefusalsChangeNothing: a target that cannot take the tenant,
// the tenant's own group, and a tenant of another group are refused before
// anything changes, and are not counted as moves.
func TestMoveOutRefusalsChangeNothing(t *testing.T) {
	lc, _, cps, mc := sharded(t)
	for _, c := range []struct {
		tenant, to string
		check      func(error) bool
	}{
		{"a", "g3", func(err error) bool {
			var u *store.GroupUnavailableError
			return errors.As(err, &u) && u.Reason == "draining"
		}},
		{"a", "g4", func(err error) bool {
			var u *store.GroupUnavailableError
			return errors.As(err, &u) && u.Reason == store.GroupNoServer
		}},
		{"a", "g9", func(err error) bool {
			var u *store.GroupUnavailableError
			return errors.As(err, &u) && u.Reason == store.GroupUnknown
		}},
		{"a", "g1", func(err error) bool { return errors.Is(err, store.ErrInvalid) }},
		{"a", "bad group!", func(err error) bool { return err != nil }},
		{"b", "g2", func(err error) bool { return errors.Is(err, ErrElsewhere) }},
		{"nobody", "g2", func(err error) bool { return errors.Is(err, store.ErrNotFound) }},
	} {
		if _, err := lc.MoveOut(t.Context(), c.tenant, c.to); !c.check(err) {
			t.Errorf("MoveOut(%s → %s) = %v", c.tenant, c.to, err)
		}
	}
	if err := lc.Pools().Serves("a"); err != nil {
		t.Fatalf("tenant a refused after moves that were refused: %v", err)
	}
	p, ok := lc.Pools().Lookup("a")
	if !ok {
		t.Fatal("tenant a's pool was dropped by moves that were refused")
	}
	if _, _, err := p.Register([]pool.Spec{{ID: "r3"}}); err != nil {
		t.Fatalf("tenant a's pool refuses a registration after moves that were refused: %v", err)
	}
	if cps.saves != 0 || mc.moved+mc.failed != 0 {
		t.Fatalf("refused moves saved %d times and counted %d moved, %d failed", cps.saves, mc.moved, mc.failed)
	}
}

// TestMoveOutRollsBackAFailedHandover: when the store's handover fails
// (not fenced), the tenant is taken in again from the state just saved
// and served here; when it is fenced (another server leads the group
// now), it is not.
func TestMoveOutRollsBackAFailedHandover(t *testing.T) {
	lc, gs, _, mc := sharded(t)
	gs.moveErr = errors.New("connection reset")
	if _, err := lc.MoveOut(t.Context(), "a", "g2"); err == nil {
		t.Fatal("MoveOut with a failing handover = nil error")
	}
	if err := lc.Pools().Serves("a"); err != nil {
		t.Fatalf("tenant a not served again after a failed move: %v", err)
	}
	p, err := lc.Pools().Pool("a")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := p.Len(); n != 2 {
		t.Fatalf("rolled-back pool holds %d resources, want the 2 saved", n)
	}
	if gs.placed["a"] != "g1" || mc.failed != 1 {
		t.Fatalf("a placed on %q, %d failed moves counted; want g1, 1", gs.placed["a"], mc.failed)
	}

	gs.moveErr = fmt.Errorf("moving: %w", store.ErrFenced)
	if _, err := lc.MoveOut(t.Context(), "a", "g2"); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("MoveOut fenced = %v, want ErrFenced", err)
	}
	if _, err := lc.Pools().Pool("a"); !errors.Is(err, ErrElsewhere) {
		t.Fatalf("a fenced server serves the tenant again: Pool = %v", err)
	}
}

// TestMoveOutOnASingleServer: a lifecycle without a handover (a single
// server) serves every tenant and refuses moves.
func TestMoveOutOnASingleServer(t *testing.T) {
	lc, _, _ := newLifecycle(t)
	if err := lc.Pools().Serves("anyone"); err != nil {
		t.Fatalf("a single server refuses a tenant: %v", err)
	}
	if _, err := lc.MoveOut(t.Context(), "a", "g2"); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("MoveOut on a single server = %v, want ErrInvalid", err)
	}
}
