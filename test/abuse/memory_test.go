package abuse

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/testenv"
)

// The issue-32 attacks: memory a tenant at the default limits can pin
// without paying, and connections it can take from every other tenant.
// Each runs against cmd/server at its defaults (only the attacker's request
// rate is raised where the attack needs many calls: rates are not what is
// tested), and checks the server's resident memory and a second tenant's
// calls.

// rss is the process's resident memory in bytes (VmRSS).
func (p *proc) rss(t *testing.T) int64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid()))
	if err != nil {
		t.Fatalf("reading the status of %s = got error %v, want nil", p.name, err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", p.pid())
	return 0
}

const mib = 1 << 20

// bigLabels are 64 labels of 512 bytes (a 256-byte key and value), the
// most a resource or a selector may carry.
func bigLabels(tag string) map[string]string {
	l := make(map[string]string, 64)
	for i := range 64 {
		k := fmt.Sprintf("%s-%03d-", tag, i)
		l[k+strings.Repeat("k", 256-len(k))] = strings.Repeat("v", 256)
	}
	return l
}

// victim is a second tenant at the defaults, with one resource, whose
// calls the attacks must leave working.
type victim struct {
	srv  *server
	key  string
	pool repoolv1.PoolServiceClient
}

func newVictim(t *testing.T, srv *server) *victim {
	t.Helper()
	v := &victim{srv: srv, key: srv.newTenant(t, "victim"), pool: srv.pool(t)}
	srv.raiseRate(t, "victim") // its calls measure latency, not its rate limit
	if _, err := v.pool.Register(withKey(v.key), &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "v-1"}}}); err != nil {
		t.Fatalf("the victim's Register = got error %v, want success", err)
	}
	return v
}

// calls times n GetResource calls of the victim and returns their
// latencies and errors.
func (v *victim) calls(n int) (lat []time.Duration, errs []error) {
	for range n {
		ctx, cancel := context.WithTimeout(withKey(v.key), 10*time.Second)
		start := time.Now()
		_, err := v.pool.GetResource(ctx, &repoolv1.GetResourceRequest{Id: "v-1"})
		cancel()
		lat = append(lat, time.Since(start))
		if err != nil {
			errs = append(errs, err)
		}
	}
	return lat, errs
}

// raiseRate lets tenant call fast: the attacks test memory and
// connections, not request limits.
func (s *server) raiseRate(t *testing.T, tenant string) {
	t.Helper()
	if code, body := s.control(t, "PUT", "/api/v1/tenants/"+tenant+"/limits", s.token, `{"rate_per_second":100000,"burst":100000}`); code != 200 {
		t.Fatalf("raising %s's rate = got %d %s, want 200", tenant, code, body)
	}
}

// attackUnreadLeaseStreams: a tenant opens 64 Leases streams on 8
// connections and sends acquire calls with 33 KB of label selectors as fast
// as flow control lets it, never reading an answer. Before issue 32 gRPC
// grew each stream's window towards 16 MiB and the server buffered it all
// (about 1 GB); now the windows are fixed (64 KiB), a tenant has at most 32
// Leases streams, and a stream whose answers are unread stops reading
// calls. The server's memory stays within its bound and the victim is
// served.
func attackUnreadLeaseStreams(t *testing.T, bins binaries) {
	srv := startServer(t, bins, "")
	v := newVictim(t, srv)
	key := srv.newTenant(t, "hoarder")
	srv.raiseRate(t, "hoarder")
	v.calls(5) // warm up
	before, _ := v.calls(20)
	base := srv.rss(t)

	call := &repoolv1.LeaseCall{Call: &repoolv1.LeaseCall_Acquire{Acquire: &repoolv1.AcquireRequest{
		Context: "c", TtlSeconds: 30, Labels: bigLabels("sel"),
	}}}
	ctx, cancel := context.WithCancel(withKey(key))
	var (
		sent     atomic.Int64 // bytes of calls sent
		lastSend atomic.Int64 // unix nanoseconds of the last send that returned
		wg       sync.WaitGroup
	)
	defer func() { cancel(); wg.Wait() }()
	lastSend.Store(time.Now().UnixNano())
	for range 8 {
		// A client window of 64 KiB: the answers it never reads fill it,
		// and gRPC's window growth (BDP) is off on this side.
		conn, err := grpc.NewClient(srv.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		pc := repoolv1.NewPoolServiceClient(conn)
		for range 8 {
			wg.Go(func() {
				st, err := pc.Leases(ctx)
				if err != nil {
					return
				}
				for {
					if err := st.Send(call); err != nil {
						return // refused (over the tenant's Leases streams) or ended
					}
					sent.Add(33 << 10)
					lastSend.Store(time.Now().UnixNano())
				}
			})
		}
	}
	// The attack has done what it can once no stream has sent for a
	// second: every one is held back by flow control, or ended.
	start := time.Now()
	peak := int64(0)
	testenv.Eventually(t, 60*time.Second, "every attacking stream to be held back", func() bool {
		if r := srv.rss(t); r > peak {
			peak = r
		}
		if peak-base > 1<<30 {
			return true // far past any bound: stop pumping the machine's memory
		}
		return time.Since(time.Unix(0, lastSend.Load())) > time.Second
	})
	peak = max(peak, srv.rss(t))
	held := srv.metric(t, `repool_lease_streams{tenant="hoarder"}`)
	during, errs := v.calls(20)
	t.Logf("attack: 64 Leases streams (%d open on the server), %d MiB of calls sent in %v, never an answer read: server RSS %d MiB -> %d MiB (+%d MiB); victim median %v p90 %v (before %v), %d errors",
		held, sent.Load()/mib, time.Since(start).Round(100*time.Millisecond), base/mib, peak/mib, (peak-base)/mib,
		quantile(during, 0.5), quantile(during, 0.9), quantile(before, 0.5), len(errs))
	if grown := peak - base; grown > leaseStreamsBound {
		t.Errorf("server RSS grew by %d MiB under unread Leases streams, want at most %d MiB",
			grown/mib, leaseStreamsBound/mib)
	}
	if held > 32 {
		t.Errorf("the hoarder's open Leases streams = got %d, want at most 32 (the default per-tenant cap)", held)
	}
	if len(errs) > 0 {
		t.Errorf("the victim's calls during the attack = got errors %v, want none", errs)
	}
	if b, d := quantile(before, 0.5), quantile(during, 0.5); d > 3*b+20*time.Millisecond {
		t.Errorf("the victim's median latency during the attack = got %v, want within 3x its usual %v (+20ms)", d, b)
	}
}

// leaseStreamsBound is what one tenant's unread Leases streams may add to
// the server's resident memory. What they hold once stalled is 32 streams
// × (64 KiB window + 64 KiB of answers + one call read ahead, 33 KiB here):
// 5 MiB. Before a stream stalls the server answers what fits in the
// client's window and gRPC's write quota (about 800 small answers, so 800
// calls of 33 KB, 27 MB a stream); that is garbage, which the collector at
// GOGC=400 lets reach five times the live heap before it runs.
const leaseStreamsBound = 256 * mib

// metric returns the value of one series of the server's /metrics (0 if
// absent).
func (s *server) metric(t *testing.T, series string) int64 {
	t.Helper()
	code, body := request(t, http.DefaultClient, "GET", s.httpURL+"/metrics", "", nil)
	if code != 200 {
		t.Fatalf("GET /metrics = got %d, want 200", code)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return int64(f)
		}
	}
	return 0
}

// openLeasesH2 opens a Leases stream on a raw HTTP/2 connection with the
// API key and sends nothing more; the connection is returned open.
func openLeasesH2(addr, key string) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&b, nil)
	fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", repoolv1.PoolService_Leases_FullMethodName},
		{":authority", "repool"}, {"content-type", "application/grpc"}, {"te", "trailers"}, {"x-api-key", key}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	if _, err := c.Write(b.Bytes()); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// attackIdleLeaseStreamsFillConnections: a tenant opens as many
// connections as the server takes (4,096 at the defaults), each with one
// Leases stream it never uses. Before issue 32 every stream stayed open
// and kept its connection busy, so the server held the whole connection
// bound and closed every other tenant's new connection at accept. Now a
// tenant holds at most its share of the connections (25%: 1,024) and 32
// Leases streams; the rest are refused and closed within a second, and
// the victim connects and is served.
func attackIdleLeaseStreamsFillConnections(t *testing.T, bins binaries) {
	srv := startServer(t, bins, "")
	v := newVictim(t, srv)
	key := srv.newTenant(t, "squatter")
	v.calls(5)
	before, _ := v.calls(20)
	baseFds, base := srv.fds(t), srv.rss(t)

	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 4096 / 16 {
				c, err := openLeasesH2(srv.grpcAddr, key)
				if err != nil {
					continue
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("attack: %d connections opened, each with an idle Leases stream; server descriptors %d (before %d)", len(conns), srv.fds(t), baseFds)

	// A new connection of the victim, and its call, within 5 seconds of
	// the flood: the connections over the squatter's share are closed a
	// second after their refused stream.
	deadline := time.Now().Add(5 * time.Second)
	var (
		served  bool
		lastErr error
	)
	for !served && time.Now().Before(deadline) {
		conn, err := grpc.NewClient(srv.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(withKey(v.key), time.Second)
		_, lastErr = repoolv1.NewPoolServiceClient(conn).GetResource(ctx, &repoolv1.GetResourceRequest{Id: "v-1"})
		cancel()
		conn.Close()
		served = lastErr == nil
		if !served {
			time.Sleep(100 * time.Millisecond) // the next try, as a client's reconnect backoff would
		}
	}
	if !served {
		t.Fatalf("the victim's call on a new connection after the squatter's flood = got %v for 5s, want success", lastErr)
	}
	testenv.Eventually(t, 10*time.Second, "the connections over the squatter's share to close", func() bool {
		return srv.fds(t) <= baseFds+1024+64
	})
	fds, rss := srv.fds(t), srv.rss(t)
	newConns := make([]time.Duration, 0, 20)
	var errs []error
	for range 20 {
		conn, err := grpc.NewClient(srv.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(withKey(v.key), 10*time.Second)
		start := time.Now()
		_, err = repoolv1.NewPoolServiceClient(conn).GetResource(ctx, &repoolv1.GetResourceRequest{Id: "v-1"})
		newConns = append(newConns, time.Since(start))
		cancel()
		conn.Close()
		if err != nil {
			errs = append(errs, err)
		}
	}
	during, errs2 := v.calls(20)
	errs = append(errs, errs2...)
	t.Logf("squatter held: server descriptors %d (before %d), RSS %d MiB (before %d MiB); victim on new connections median %v, on its own median %v p90 %v (before %v), %d errors",
		fds, baseFds, rss/mib, base/mib, quantile(newConns, 0.5), quantile(during, 0.5), quantile(during, 0.9), quantile(before, 0.5), len(errs))
	if len(errs) > 0 {
		t.Errorf("the victim's calls while the squatter holds its share = got errors %v, want none", errs)
	}
	if b, d := quantile(before, 0.5), quantile(during, 0.5); d > 3*b+20*time.Millisecond {
		t.Errorf("the victim's median latency = got %v, want within 3x its usual %v (+20ms)", d, b)
	}
	if grown := rss - base; grown > connectionsBound {
		t.Errorf("server RSS grew by %d MiB with the squatter's connections, want at most %d MiB", grown/mib, connectionsBound/mib)
	}
}

// connectionsBound is what one tenant's share of the connections (1,024,
// 32 of them with an idle Leases stream) may add to the server's resident
// memory: gRPC's buffers of an idle HTTP/2 connection (a 32 KiB read
// buffer, the framer, two goroutines) are about 50-70 KiB.
const connectionsBound = 160 * mib

// attackLongIdsAndLabels: a tenant registers resources with 256-byte ids
// and 64 labels of 512 bytes, 25 a call (825 KB, under the 1 MiB message
// bound), until the server refuses. Before
// issue 32 budgets counted resources, not bytes: a tenant's default share
// (25,000 resources) of such resources is about 825 MB of ids and labels,
// and 11,900 of them took 1.78 GB of the server's memory. Now a resource
// costs a unit of the resource budget, and one more per whole KiB of its id and
// labels (33 units for these), so the tenant's share holds 757 of them.
func attackLongIdsAndLabels(t *testing.T, bins binaries) {
	srv := startServer(t, bins, "")
	v := newVictim(t, srv)
	key := srv.newTenant(t, "bloater")
	srv.raiseRate(t, "bloater")
	v.calls(5)
	before, _ := v.calls(20)
	base := srv.rss(t)
	pc := srv.pool(t)
	labels := bigLabels("label")
	registered, peak := 0, base
	var refusal error
	start := time.Now()
	for call := 0; refusal == nil; call++ {
		req := &repoolv1.RegisterRequest{}
		for i := range 25 {
			id := fmt.Sprintf("r-%06d-%03d-", call, i)
			req.Resources = append(req.Resources, &repoolv1.Resource{Id: id + strings.Repeat("x", 256-len(id)), Labels: labels})
		}
		resp, err := pc.Register(withKey(key), req)
		if err != nil {
			refusal = err
			break
		}
		registered += int(resp.GetRegistered())
		if r := srv.rss(t); r > peak {
			peak = r
		}
		if peak-base > 1<<30 {
			break // far past any bound: stop pumping the machine's memory
		}
	}
	peak = max(peak, srv.rss(t))
	during, errs := v.calls(20)
	t.Logf("attack: %d resources of 256-byte ids and 64 labels of 512 B registered in %v, then %v; server RSS %d MiB -> %d MiB (+%d MiB); victim median %v (before %v), %d errors",
		registered, time.Since(start).Round(100*time.Millisecond), status.Code(refusal), base/mib, peak/mib, (peak-base)/mib,
		quantile(during, 0.5), quantile(before, 0.5), len(errs))
	if status.Code(refusal) != codes.ResourceExhausted {
		t.Errorf("the bloater's registrations ended with %v, want RESOURCE_EXHAUSTED (its resource budget)", refusal)
	}
	if registered > 25000/33 {
		t.Errorf("the bloater registered %d resources of 33 KB, want at most %d (25,000 units of its default share, 33 units each)", registered, 25000/33)
	}
	if grown := peak - base; grown > labelsBound {
		t.Errorf("server RSS grew by %d MiB under the registrations, want at most %d MiB", grown/mib, labelsBound/mib)
	}
	if len(errs) > 0 {
		t.Errorf("the victim's calls after the attack = got errors %v, want none", errs)
	}
	// The victim can still register: the bloater's units are its own share.
	if _, err := v.pool.Register(withKey(v.key), &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "v-2", Labels: map[string]string{"region": "eu"}}}}); err != nil {
		t.Errorf("the victim's Register after the attack = got error %v, want success", err)
	}
}

// labelsBound is what one tenant's share of the resource budget in ids and
// labels may add to the server's resident memory: 25,000 units hold at
// most 25,000 KiB (24 MiB) of ids and labels, kept about twice over (the
// strings, the label maps, the label index), plus the garbage of the
// decoded requests (3.3 MB each) that the collector (GOGC=400) may leave
// until it runs.
const labelsBound = 256 * mib
