package sidecar_test

import (
	"context"
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
	"github.com/repool/repool/internal/sidecar/fakeserver"
	"github.com/repool/repool/internal/sidecar/resilience"
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
// its group and refuses the others with TENANT_ELSEWHERE, as a group's
// active server does.
type groupServer struct {
	group   string
	serves  atomic.Bool
	served  atomic.Int64
	refused atomic.Int64
	*fakeserver.Server
}

func startGroupServer(t *testing.T, group string, serves bool) *groupServer {
	g := &groupServer{group: group}
	g.serves.Store(serves)
	g.Server = fakeserver.Start(t, fakeserver.Config{
		Tenant: "acme",
		NoAuth: true, // tokens come from whichever group answered IssueToken
		Acquire: func(ctx context.Context, req *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error) {
			if !g.serves.Load() {
				g.refused.Add(1)
				return nil, fakeserver.TenantElsewhere("elsewhere")
			}
			g.served.Add(1)
			return &repoolv1.AcquireResponse{Lease: &repoolv1.Lease{LeaseId: "l-" + g.group, ResourceId: "r1", FencingToken: 1, ExpiresAt: timestamppb.New(time.Now().Add(time.Minute))}}, nil
		},
	})
	return g
}

// TestGroupsThroughHAProxy runs the sidecar against the real HAProxy with
// two groups, each a fake server: the sidecar learns its tenant from
// IssueToken, HAProxy routes its calls by x-repool-tenant to the tenant's
// group, and when the tenant moves under load (the old group refuses it
// with TENANT_ELSEWHERE, then the placement sync switches the map) no
// call fails: the refused ones are retried until the new group serves
// them, and the breaker stays closed.
func TestGroupsThroughHAProxy(t *testing.T) {
	def := startGroupServer(t, "default", false)
	big := startGroupServer(t, "big", true)
	// HAProxy checks a health port per server; the calls go to the fakes.
	defLB := haproxytest.NewServer(t, "def1", http.StatusOK)
	bigLB := haproxytest.NewServer(t, "big1", http.StatusOK)
	bigLB.Group = "big"
	for _, p := range []struct {
		lb   *haproxytest.Server
		fake *fakeserver.Server
	}{{defLB, def.Server}, {bigLB, big.Server}} {
		_, port, _ := net.SplitHostPort(p.fake.Addr())
		p.lb.GRPCPort, _ = strconv.Atoi(port)
	}
	dir := t.TempDir()
	inv := haproxytest.LoopbackInventory(t, dir, defLB, bigLB)
	proc := haproxytest.Start(t, inv, dir)
	haproxytest.WaitStatus(t, proc.Runtime, map[string]string{"def1": "UP", "big1": "UP"})

	src := &placements{pl: map[string]string{"acme": "big"}}
	syncer, err := tenantmap.New(tenantmap.Config{Source: src, Socket: proc.Socket, File: inv.HAProxy.TenantMap, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer syncer.Close()
	if err := syncer.Sync(context.Background()); err != nil {
		t.Fatalf("first Sync() = got error %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	syncDone := make(chan struct{})
	go func() { defer close(syncDone); syncer.Run(ctx) }()
	defer func() { cancel(); <-syncDone }()

	fast := fast(def.Server)
	fast.Endpoint = net.JoinHostPort(inv.VIP.IP().String(), strconv.Itoa(inv.VIP.GRPCPort))
	fast.Timeout = 10 * time.Second
	fast.Retry = resilience.RetryPolicy{MaxRetries: 10, InitialInterval: 20 * time.Millisecond, MaxInterval: 250 * time.Millisecond}
	fast.RetryBudget = resilience.BudgetPolicy{Ratio: 1, MinPerSecond: 1000, Window: 10 * time.Second}
	fast.Breaker.MinRequests = 5
	h := start(t, one("p", fast), sidecar.Options{})

	if r := h.acquire("p"); r.status != 200 {
		t.Fatalf("acquire = %d %s, want 200", r.status, r.raw)
	}
	if big.served.Load() != 1 || def.Calls("Acquire") != 0 {
		t.Fatalf("acquire served by big %d times, default %d, want big once: HAProxy routes by the sidecar's tenant", big.served.Load(), def.Calls("Acquire"))
	}
	if def.Calls("IssueToken") != 1 || big.Calls("IssueToken") != 0 {
		t.Errorf("IssueToken calls: default %d, big %d; want the one call in the default group (it carries no tenant)", def.Calls("IssueToken"), big.Calls("IssueToken"))
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
