package server

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/limits"
	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/testenv"
)

type running struct {
	s      *Server
	out    string
	key    string // demo API key, on first start
	op     string // operator token, on first start
	conn   *grpc.ClientConn
	pool   repoolv1.PoolServiceClient
	authc  repoolv1.AuthServiceClient
	cancel context.CancelFunc
	done   chan error
}

var (
	keyRE = regexp.MustCompile(`demo API key:\s+(\S+)`)
	opRE  = regexp.MustCompile(`operator token:\s+(\S+)`)
)

// start runs a server on loopback port 0 with the given store and stops it
// when the test ends.
func start(t testing.TB, cfg Config) *running {
	t.Helper()
	return startWith(t, cfg, Options{})
}

// startWith is start with opts (its Out is the test's).
func startWith(t testing.TB, cfg Config, opts Options) *running {
	t.Helper()
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	if cfg.CheckpointInterval == 0 {
		cfg.CheckpointInterval = time.Hour // tests checkpoint at shutdown
	}
	var out bytes.Buffer
	opts.Out = &out
	s, err := New(context.Background(), cfg, opts)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{s: s, out: out.String(), cancel: cancel, done: make(chan error, 1)}
	if m := keyRE.FindStringSubmatch(r.out); m != nil {
		r.key = m[1]
	}
	if m := opRE.FindStringSubmatch(r.out); m != nil {
		r.op = m[1]
	}
	go func() { r.done <- s.Run(ctx) }()
	r.conn, err = grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	r.pool = repoolv1.NewPoolServiceClient(r.conn)
	r.authc = repoolv1.NewAuthServiceClient(r.conn)
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *running) stop(t testing.TB) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.conn.Close()
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run() = %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("server did not stop within 20s")
	}
}

func withKey(key string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
}

// api calls the control plane and decodes the JSON answer into out.
func (r *running) api(t testing.TB, method, path, token, body string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+r.s.HTTPAddr()+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, raw)
		}
	}
	return resp.StatusCode
}

func sqliteStore(t testing.TB) string { return "sqlite:" + filepath.Join(t.TempDir(), "repool.db") }

// requestLimit is the Limits of a configuration whose tenants' default
// request limit is rate per second, burst burst, out of a test's way.
func requestLimit(rate, burst float64) limits.Values {
	return limits.Values{}.With(limits.RatePerSecond, rate).With(limits.Burst, burst)
}

func TestNewcomerFlow(t *testing.T) {
	r := start(t, Config{Store: sqliteStore(t)})
	if r.key == "" || r.op == "" || !strings.Contains(r.out, "grpcurl") {
		t.Fatalf("first start printed %q, want a demo key, an operator token and how to call the server", r.out)
	}
	ctx := withKey(r.key)
	reg, err := r.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "proxy-1", Capacity: 2}}})
	if err != nil || reg.GetRegistered() != 1 {
		t.Fatalf("Register() = %v, %v", reg, err)
	}
	acq, err := r.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "search", TtlSeconds: 30})
	if err != nil || acq.GetLease().GetResourceId() != "proxy-1" {
		t.Fatalf("Acquire() = %v, %v", acq, err)
	}
	if _, err := r.pool.Release(ctx, &repoolv1.ReleaseRequest{LeaseId: acq.GetLease().GetLeaseId(), FencingToken: acq.GetLease().GetFencingToken(), Outcome: repoolv1.Outcome_SUCCESS}); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	tok, err := r.authc.IssueToken(ctx, &repoolv1.IssueTokenRequest{})
	if err != nil {
		t.Fatalf("IssueToken() = %v", err)
	}
	bctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok.GetToken())
	res, err := r.pool.GetResource(bctx, &repoolv1.GetResourceRequest{Id: "proxy-1"})
	if err != nil || len(res.GetResource().GetContexts()) != 1 {
		t.Fatalf("GetResource(with bearer) = %v, %v", res, err)
	}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/readyz/active": 200} {
		resp, err := http.Get("http://" + r.s.HTTPAddr() + path)
		if err != nil || resp.StatusCode != want {
			t.Fatalf("GET %s = %v, %v; want %d", path, resp, err, want)
		}
		resp.Body.Close()
	}
	resp, err := http.Get("http://" + r.s.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"repool_auth_tokens_issued_total 1", `repool_pool_resources{tenant="demo"} 1`, `repool_grpc_requests_total{code="OK",method="/repool.v1.PoolService/Acquire"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestRestartRestoresStateAndBudgetBeforeTraffic(t *testing.T) {
	st := sqliteStore(t)
	r := start(t, Config{Store: st, GlobalResources: 3, DefaultTenantShare: 100})
	ctx := withKey(r.key)
	if _, err := r.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "a"}, {Id: "b"}, {Id: "c"}}}); err != nil {
		t.Fatal(err)
	}
	acq, err := r.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	r.stop(t)

	r2 := start(t, Config{Store: st, GlobalResources: 3, DefaultTenantShare: 100})
	if r2.out != "" {
		t.Fatalf("second start printed %q, want nothing", r2.out)
	}
	_, err = r2.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "d"}}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Register(new, after restore of 3 of 3) = %v, want RESOURCE_EXHAUSTED: restored state must count before traffic", err)
	}
	if _, err := r2.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "a"}}}); err != nil {
		t.Fatalf("Register(existing) = %v, want success", err)
	}
	acq2, err := r2.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	if acq2.GetLease().GetFencingToken() <= acq.GetLease().GetFencingToken() {
		t.Fatalf("token after restart %d, before %d: tokens must keep growing", acq2.GetLease().GetFencingToken(), acq.GetLease().GetFencingToken())
	}
}

// TestStartRefusesAnEpochTokensCannotCarry: a store whose epoch counter
// has passed the largest epoch a fencing token carries stops the server at
// start, with the reason, instead of failing every call of every tenant;
// the failed start leaves its ports free.
func TestStartRefusesAnEpochTokensCannotCarry(t *testing.T) {
	st := sqliteStore(t)
	start(t, Config{Store: st}).stop(t)
	db, err := sql.Open("sqlite", strings.TrimPrefix(st, "sqlite:"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE server_counters SET value = ? WHERE name IN ('epoch', 'epoch_seq')`, pool.MaxEpoch); err != nil {
		t.Fatal(err)
	}
	grpcAddr := freeAddr(t)
	cfg := Config{Store: st, GRPCAddr: grpcAddr, HTTPAddr: "127.0.0.1:0"}
	s, err := New(context.Background(), cfg, Options{Out: io.Discard})
	if err == nil {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = s.Run(ctx) // shuts it down
		t.Fatal("New() on a store at the largest epoch = nil error, want the epoch refused")
	}
	if !strings.Contains(err.Error(), "epoch") {
		t.Fatalf("New() = %v, want an error naming the epoch", err)
	}
	// What the failed New bound is free again.
	ln, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		t.Fatalf("after a failed New(), listening on its gRPC address = %v, want the port free", err)
	}
	ln.Close()
}

// TestFailedFirstStartSpendsNoSecret: a first start that cannot bind its
// ports fails before it creates the demo tenant or prints a secret, so the
// next start, on free ports, is still the first and prints them.
func TestFailedFirstStartSpendsNoSecret(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tests := []struct {
		name               string
		grpcAddr, httpAddr string
		want               string
	}{
		{"gRPC port in use", busy.Addr().String(), "127.0.0.1:0", "gRPC listener"},
		{"HTTP port in use", "127.0.0.1:0", busy.Addr().String(), "HTTP listener"},
	}
	st := sqliteStore(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			s, err := New(context.Background(), Config{Store: st, GRPCAddr: tt.grpcAddr, HTTPAddr: tt.httpAddr}, Options{Out: &out})
			if err == nil {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				_ = s.Run(ctx)
				t.Fatalf("New() with the %s = nil error, want it refused", tt.name)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "address already in use") {
				t.Errorf("New() = %v, want an error naming the %s and \"address already in use\"", err, tt.want)
			}
			if out.Len() > 0 {
				t.Errorf("New() with the %s printed %q, want nothing", tt.name, out.String())
			}
		})
	}
	r := start(t, Config{Store: st})
	if r.key == "" || r.op == "" {
		t.Fatalf("start after the failed ones printed %q, want the first start's demo key and operator token", r.out)
	}
	if want := "x-api-key: " + r.key + "' -d '{\"resources\":[{\"id\":\"proxy-1\",\"capacity\":2}]}' " + r.s.GRPCAddr(); !strings.Contains(r.out, want) {
		t.Errorf("first start printed %q, want examples aimed at the bound gRPC address (%q)", r.out, want)
	}
}

// freeAddr returns a loopback address with a port nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestBudgetRaceOverGRPC(t *testing.T) {
	for round := 0; round < 3; round++ {
		r := start(t, Config{Store: sqliteStore(t), GlobalResources: 20, DefaultTenantShare: 100, Limits: requestLimit(1e6, 1e6)})
		ctx := withKey(r.key)
		var ok, exhausted atomic.Int32
		var wg sync.WaitGroup
		for i := 0; i < 200; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				_, err := r.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: fmt.Sprintf("r%03d", i)}}})
				switch status.Code(err) {
				case codes.OK:
					ok.Add(1)
				case codes.ResourceExhausted:
					exhausted.Add(1)
				default:
					t.Errorf("Register() = %v", err)
				}
			}(i)
		}
		wg.Wait()
		if ok.Load() != 20 || exhausted.Load() != 180 {
			t.Fatalf("round %d: %d succeeded, %d exhausted; want exactly 20 and 180", round, ok.Load(), exhausted.Load())
		}
		r.stop(t)
	}
}

func TestControlPlaneChangesApplyAtOnce(t *testing.T) {
	// The rate limiter's buckets refill on the server's clock, a fake here.
	fake := clock.NewFake(time.Now())
	r := startWith(t, Config{Store: sqliteStore(t)}, Options{Clock: fake})
	var tenant map[string]any
	if code := r.api(t, "POST", "/api/v1/tenants", r.op, `{"id":"acme","name":"Acme"}`, &tenant); code != 201 {
		t.Fatalf("create tenant = %d", code)
	}
	var key struct{ ID, Key string }
	if code := r.api(t, "POST", "/api/v1/tenants/acme/keys", r.op, `{"name":"k1"}`, &key); code != 201 || key.Key == "" {
		t.Fatalf("create key = %d %+v", code, key)
	}
	ctx := withKey(key.Key)
	if _, err := r.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r"}}}); err != nil {
		t.Fatal(err)
	}
	stream, err := r.pool.SubscribeEvents(ctx, &repoolv1.SubscribeEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "acme's event streams to be 1", func() bool { return r.s.svc.Streams("acme") == 1 })

	if code := r.api(t, "POST", "/api/v1/tenants/acme/suspend", r.op, ``, nil); code != 200 {
		t.Fatalf("suspend = %d", code)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("open stream after suspension ended with %v, want PERMISSION_DENIED", err)
	}
	if _, err := r.pool.ListResources(ctx, &repoolv1.ListResourcesRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("call of a suspended tenant = %v, want PERMISSION_DENIED", err)
	}
	if code := r.api(t, "POST", "/api/v1/tenants/acme/reactivate", r.op, ``, nil); code != 200 {
		t.Fatalf("reactivate = %d", code)
	}
	if _, err := r.pool.ListResources(ctx, &repoolv1.ListResourcesRequest{}); err != nil {
		t.Fatalf("call after reactivation = %v", err)
	}

	// Limits apply live: a burst of 2 at 1/s refuses the third call with a
	// retry-after; a stream limit of 1 refuses a second stream.
	if code := r.api(t, "PUT", "/api/v1/tenants/acme/limits", r.op, `{"rate_per_second":1,"burst":2,"max_streams":1}`, nil); code != 200 {
		t.Fatalf("put limits = %d", code)
	}
	var refused error
	var trailer metadata.MD
	for i := 0; i < 4 && refused == nil; i++ {
		_, refused = r.pool.GetResource(ctx, &repoolv1.GetResourceRequest{Id: "r"}, grpc.Trailer(&trailer))
	}
	if status.Code(refused) != codes.ResourceExhausted || len(trailer.Get("retry-after-ms")) != 1 {
		t.Fatalf("calls over the new limit = %v with trailer %v, want RESOURCE_EXHAUSTED and retry-after-ms", refused, trailer)
	}
	if code := r.api(t, "PUT", "/api/v1/tenants/acme/limits", r.op, `{"rate_per_second":1000,"burst":1000}`, nil); code != 200 {
		t.Fatalf("put limits = %d", code)
	}
	// The bucket keeps its (spent) tokens across a change of rate; at
	// 1,000/s it holds a stream's cost again within milliseconds.
	fake.Advance(50 * time.Millisecond)
	sctx, cancel := context.WithCancel(ctx)
	if _, err := r.pool.SubscribeEvents(sctx, &repoolv1.SubscribeEventsRequest{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "acme's event streams to be 1", func() bool { return r.s.svc.Streams("acme") == 1 })
	second, err := r.pool.SubscribeEvents(ctx, &repoolv1.SubscribeEventsRequest{})
	if err == nil {
		_, err = second.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream with max_streams 1 = %v, want RESOURCE_EXHAUSTED", err)
	}
	cancel()
	testenv.Eventually(t, 5*time.Second, "acme's event streams to be 0", func() bool { return r.s.svc.Streams("acme") == 0 })

	if code := r.api(t, "DELETE", "/api/v1/tenants/acme/keys/"+key.ID, r.op, ``, nil); code != 200 && code != 204 {
		t.Fatalf("revoke = %d", code)
	}
	if _, err := r.pool.ListResources(ctx, &repoolv1.ListResourcesRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("call with a revoked key = %v, want UNAUTHENTICATED at once", err)
	}
}

func TestDataPlaneChangesAreAudited(t *testing.T) {
	r := start(t, Config{Store: sqliteStore(t)})
	ctx := withKey(r.key)
	if _, err := r.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "a"}, {Id: "b"}}}); err != nil {
		t.Fatal(err)
	}
	// Five failures in a row quarantine a for the context: a block event.
	for i := 0; i < 5; i++ {
		if _, err := r.pool.Report(ctx, &repoolv1.ReportRequest{ResourceId: "a", Context: "x", Outcome: repoolv1.Outcome_FAILURE}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.pool.Deregister(ctx, &repoolv1.DeregisterRequest{ResourceIds: []string{"b"}}); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"resources.register": false, "resources.deregister": false, "resource.blocked": false}
	testenv.Eventually(t, 5*time.Second, "the audit entries of the register, the deregister and the block", func() bool {
		var page struct {
			Entries []struct{ Action, Target string }
		}
		r.api(t, "GET", "/api/v1/tenants/demo/audit", r.op, "", &page)
		for _, e := range page.Entries {
			if _, ok := want[e.Action]; ok {
				want[e.Action] = true
			}
		}
		return want["resources.register"] && want["resources.deregister"] && want["resource.blocked"]
	})
}
