package sidecar_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/lb/haproxy/haproxytest"
	"github.com/repool/repool/internal/lb/tenantmap"
	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/config"
	"github.com/repool/repool/internal/sidecar/fakeserver"
	"github.com/repool/repool/internal/sidecar/resilience"
	"github.com/repool/repool/internal/sidecar/token"
	"github.com/repool/repool/internal/testenv"
)

// placements is a tenantmap.Source the test changes.
type placements struct {
	mu sync.Mutex
	pl map[string]string
}

func (p *placements) Placements(context.Context) (map[string]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.pl), nil
}

func (p *placements) set(tenant, group string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pl[tenant] = group
}

// groupServer is a fake repool server that serves the tenants placed on
// its group and refuses the others with TENANT_ELSEWHERE naming the
// caller's tenant, IssueToken included, as a group's active server does.
type groupServer struct {
	group   string
	serves  atomic.Bool
	served  atomic.Int64
	refused atomic.Int64
	issued  atomic.Int64
	*fakeserver.Server
}

func startGroupServer(t *testing.T, group string, serves bool, tokenTTL time.Duration) *groupServer {
	g := &groupServer{group: group}
	g.serves.Store(serves)
	g.Server = fakeserver.Start(t, fakeserver.Config{
		Tenant:   "acme",
		TokenTTL: tokenTTL,
		NoAuth:   true, // tokens come from whichever group answered IssueToken
		IssueToken: func(ctx context.Context, _ *repoolv1.IssueTokenRequest) (*repoolv1.IssueTokenResponse, error) {
			if !g.serves.Load() {
				g.refused.Add(1)
				return nil, fakeserver.TenantElsewhereOf("acme", "elsewhere")
			}
			resp, err := g.Issue(ctx)
			if err == nil {
				g.issued.Add(1)
			}
			return resp, err
		},
		Acquire: func(ctx context.Context, req *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error) {
			if !g.serves.Load() {
				g.refused.Add(1)
				return nil, fakeserver.TenantElsewhereOf("acme", "elsewhere")
			}
			g.served.Add(1)
			return &repoolv1.AcquireResponse{Lease: &repoolv1.Lease{LeaseId: "l-" + g.group, ResourceId: "r1", FencingToken: 1, ExpiresAt: timestamppb.New(time.Now().Add(time.Minute))}}, nil
		},
	})
	return g
}

// groupsFront is the real HAProxy in front of two groups, default and big,
// each one fake server, with the tenant map kept by the placement sync.
type groupsFront struct {
	def, big *groupServer
	src      *placements
	endpoint string // the VIP
}

// startGroupsFront starts the two groups (acme placed on big), HAProxy and
// the placement sync, all stopped when the test ends.
func startGroupsFront(t *testing.T, tokenTTL time.Duration) *groupsFront {
	f := &groupsFront{
		def: startGroupServer(t, "default", false, tokenTTL),
		big: startGroupServer(t, "big", true, tokenTTL),
		src: &placements{pl: map[string]string{"acme": "big"}},
	}
	// HAProxy checks a health port per server; the calls go to the fakes.
	defLB := haproxytest.NewServer(t, "def1", http.StatusOK)
	bigLB := haproxytest.NewServer(t, "big1", http.StatusOK)
	bigLB.Group = "big"
	for _, p := range []struct {
		lb   *haproxytest.Server
		fake *fakeserver.Server
	}{{defLB, f.def.Server}, {bigLB, f.big.Server}} {
		_, port, _ := net.SplitHostPort(p.fake.Addr())
		p.lb.GRPCPort, _ = strconv.Atoi(port)
	}
	dir := t.TempDir()
	inv := haproxytest.LoopbackInventory(t, dir, defLB, bigLB)
	proc := haproxytest.Start(t, inv, dir)
	haproxytest.WaitStatus(t, proc.Runtime, map[string]string{"def1": "UP", "big1": "UP"})

	syncer, err := tenantmap.New(tenantmap.Config{Source: f.src, Socket: proc.Socket, File: inv.HAProxy.TenantMap, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := syncer.Sync(context.Background()); err != nil {
		t.Fatalf("first Sync() = got error %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	syncDone := make(chan struct{})
	go func() { defer close(syncDone); syncer.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-syncDone; syncer.Close() })
	f.endpoint = net.JoinHostPort(inv.VIP.IP().String(), strconv.Itoa(inv.VIP.GRPCPort))
	return f
}

// provider is the sidecar's provider on the VIP, with retries that span a
// move.
func (f *groupsFront) provider() config.Provider {
	pc := fast(f.def.Server)
	pc.Endpoint = f.endpoint
	pc.Timeout = 10 * time.Second
	pc.Retry = resilience.RetryPolicy{MaxRetries: 10, InitialInterval: 20 * time.Millisecond, MaxInterval: 250 * time.Millisecond}
	pc.RetryBudget = resilience.BudgetPolicy{Ratio: 1, MinPerSecond: 1000, Window: 10 * time.Second}
	pc.Breaker.MinRequests = 5
	return pc
}

// move places acme on group to: the old group refuses it at once (as a
// source group that hands it over does), the new one serves it, and the
// placement (and so HAProxy's map) follows.
func (f *groupsFront) move(to string) {
	f.def.serves.Store(to == "default")
	f.big.serves.Store(to == "big")
	f.src.set("acme", to)
}

// TestGroupsThroughHAProxy runs the sidecar against the real HAProxy with
// two groups, each a fake server: the sidecar learns its tenant from the
// TENANT_ELSEWHERE refusal of its first IssueToken, HAProxy routes its
// calls by x-repool-tenant to the tenant's group, and when the tenant
// moves under load (the old group refuses it with TENANT_ELSEWHERE, then
// the placement sync switches the map) no call fails: the refused ones are
// retried until the new group serves them, and the breaker stays closed.
func TestGroupsThroughHAProxy(t *testing.T) {
	f := startGroupsFront(t, 0)
	def, big, src := f.def, f.big, f.src
	h := start(t, one("p", f.provider()), sidecar.Options{})

	if r := h.acquire("p"); r.status != 200 {
		t.Fatalf("acquire = %d %s, want 200", r.status, r.raw)
	}
	if big.served.Load() != 1 || def.Calls("Acquire") != 0 {
		t.Fatalf("acquire served by big %d times, default %d, want big once: HAProxy routes by the sidecar's tenant", big.served.Load(), def.Calls("Acquire"))
	}
	if def.RouteCalls("IssueToken", "") != 1 || def.Calls("IssueToken") != 1 || big.RouteCalls("IssueToken", "acme") != 1 || big.Calls("IssueToken") != 1 {
		t.Errorf("IssueToken calls: default %d (%d without a tenant), big %d (%d naming acme); want one without a tenant in the default group (the sidecar did not know it), "+
			"refused naming acme, then one naming acme in big", def.Calls("IssueToken"), def.RouteCalls("IssueToken", ""), big.Calls("IssueToken"), big.RouteCalls("IssueToken", "acme"))
	}

	// Load, then the move: big stops serving acme at once (as a source
	// group that hands it over does), the placement follows a little later.
	var failed, ok atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if r := h.acquire("p"); r.status == 200 {
					ok.Add(1)
				} else {
					failed.Add(1)
					t.Errorf("acquire during the move = %d %s, want 200", r.status, r.raw)
				}
			}
		})
	}
	testenv.Eventually(t, 10*time.Second, "calls to flow", func() bool { return ok.Load() >= 20 })
	big.serves.Store(false)
	testenv.Eventually(t, 10*time.Second, "big to refuse some calls", func() bool { return big.refused.Load() >= 5 })
	def.serves.Store(true)
	src.set("acme", "default")
	testenv.Eventually(t, 10*time.Second, "the default group to serve acme", func() bool { return def.served.Load() >= 20 })
	close(stop)
	wg.Wait()

	if failed.Load() != 0 {
		t.Errorf("%d of %d calls failed during the move, want 0", failed.Load(), failed.Load()+ok.Load())
	}
	if b := h.breaker("p"); b["state"] != "closed" {
		t.Errorf("breaker after the move = %v, want closed", b)
	}
	t.Logf("move under load: %d calls, %d refused with TENANT_ELSEWHERE and retried, 0 failed", ok.Load(), big.refused.Load())
}

// TestGroupsTokensThroughHAProxy: every tenant is served through the front
// end on every group, whatever its sidecar's tokens do. With tokens that
// live 3 s (usable 2.5 s, renewed after about 1.2 s), a sidecar started
// while its tenant is on the default group has its tokens expire and be
// renewed in the tenant's group after a move to big, after a move back and
// after a move to big again, with every call served; and a sidecar
// restarted while its tenant is on big (not the default group) is served
// and renews its tokens there. An IssueToken without the tenant reaches
// the default group, which refuses it naming the tenant; the sidecar sends
// it again with the tenant, and from then on every IssueToken carries it.
func TestGroupsTokensThroughHAProxy(t *testing.T) {
	f := startGroupsFront(t, 3*time.Second)
	f.move("default")
	pc := f.provider()
	pc.Token = token.Policy{Skew: 500 * time.Millisecond, RefreshAt: 0.5}
	cfg := one("p", pc)

	var calls, failed atomic.Int64
	acquire := func(h *harness, when string) bool {
		calls.Add(1)
		if r := h.acquire("p"); r.status != 200 {
			failed.Add(1)
			t.Errorf("acquire %s = %d %s, want 200", when, r.status, r.raw)
			return false
		}
		return true
	}
	// renewed waits, with calls flowing, until group g has issued n more
	// tokens: the tokens held before have expired by then.
	renewed := func(h *harness, g *groupServer, n int64, when string) {
		t.Helper()
		from := g.issued.Load()
		testenv.Eventually(t, 20*time.Second, fmt.Sprintf("%d tokens renewed in group %s %s", n, g.group, when), func() bool {
			acquire(h, when)
			return g.issued.Load() >= from+n
		})
	}

	h := start(t, cfg, sidecar.Options{})
	if !acquire(h, "with the tenant on the default group") {
		t.FailNow()
	}
	renewed(h, f.def, 3, "on the default group")
	for _, to := range []*groupServer{f.big, f.def, f.big} {
		f.move(to.group)
		renewed(h, to, 3, "after the move to "+to.group)
	}
	if got := f.def.RouteCalls("IssueToken", "") + f.big.RouteCalls("IssueToken", ""); got != 1 {
		t.Errorf("IssueToken calls without a tenant = %d, want 1: the first, answered by the default group; the token named the tenant", got)
	}

	// The sidecar restarts while its tenant is on big: its first IssueToken
	// goes without the tenant, to the default group, and is refused there.
	h.stop()
	h = start(t, cfg, sidecar.Options{})
	if !acquire(h, "from the restarted sidecar, tenant on big") {
		t.FailNow()
	}
	if got := f.def.RouteCalls("IssueToken", ""); got != 2 {
		t.Errorf("IssueToken calls without a tenant in the default group = %d, want 2 (the first sidecar's first and the restarted one's)", got)
	}
	renewed(h, f.big, 2, "after the restart")
	if failed.Load() != 0 {
		t.Errorf("%d of %d calls failed, want 0", failed.Load(), calls.Load())
	}
	if b := h.breaker("p"); b["state"] != "closed" {
		t.Errorf("breaker = %v, want closed", b)
	}
	t.Logf("%d calls, 0 failed; tokens issued: default %d, big %d; IssueToken refused: default %d, big %d",
		calls.Load(), f.def.issued.Load(), f.big.issued.Load(), f.def.Calls("IssueToken")-f.def.issued.Load(), f.big.Calls("IssueToken")-f.big.issued.Load())
}
