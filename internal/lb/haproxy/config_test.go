package haproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/repool/repool/internal/lb/golden"
	"github.com/repool/repool/internal/lb/inventory"
	"github.com/repool/repool/internal/tlsconf/tlstest"
)

// examplePath is the inventory checked in for operators.
const examplePath = "../../../haproxy/inventory.yaml"

// exampleTLSDir holds the example's certificates on an LB host.
const exampleTLSDir = "/etc/haproxy/tls/"

// loadExample loads the example inventory with its TLS files moved to a
// temporary directory holding real ones (from a private CA), so that
// "haproxy -c" can load them; restoreTLSDir puts the example's directory
// back into a rendered file.
func loadExample(tb testing.TB) *inventory.Inventory {
	tb.Helper()
	inv, err := inventory.Load(examplePath)
	if err != nil {
		tb.Fatalf("inventory.Load(%s) = got error %v, want nil", examplePath, err)
	}
	// Not tb.TempDir(): a test's name may put a comma in it, which the
	// inventory refuses in a path.
	dir, err := os.MkdirTemp("", "repool-tls-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	ca := tlstest.NewCA(tb, "example CA")
	for _, f := range []struct {
		path    *string
		content []byte
	}{
		{&inv.TLS.Cert, ca.Issue("vip", "repool.internal").PEM()},
		{&inv.TLS.ServerCA, ca.PEM},
		{&inv.TLS.ClientCert, ca.Issue("haproxy").PEM()},
	} {
		rest, ok := strings.CutPrefix(*f.path, exampleTLSDir)
		if !ok {
			tb.Fatalf("example TLS file %s is not in %s", *f.path, exampleTLSDir)
		}
		*f.path = filepath.Join(dir, rest)
		if err := os.WriteFile(*f.path, f.content, 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return inv
}

// restoreTLSDir replaces inv's TLS directory (see loadExample) with the
// example's in cfg.
func restoreTLSDir(inv *inventory.Inventory, cfg []byte) []byte {
	return bytes.ReplaceAll(cfg, []byte(filepath.Dir(inv.TLS.Cert)+"/"), []byte(exampleTLSDir))
}

// TestRenderGolden renders the example inventory, compares the result with
// its golden file (-update rewrites it) and has the real HAProxy check it.
// The shared configuration's golden file is the one checked in for
// operators, haproxy/haproxy.cfg, so that there is one copy of it.
func TestRenderGolden(t *testing.T) {
	tests := []struct {
		name   string
		golden string // relative to this package
		opts   Options
	}{
		{"shared by all LB hosts", "../../../haproxy/haproxy.cfg", Options{}},
		{"lb2 with its own pid file", "testdata/haproxy-lb2.cfg.golden", Options{Host: "lb2", PIDFile: "/run/haproxy-lb2.pid"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := loadExample(t)
			rendered, err := Render(context.Background(), inv, tt.opts)
			if err != nil {
				t.Fatalf("Render(example, %+v) = got error %v, want nil", tt.opts, err)
			}
			got := restoreTLSDir(inv, rendered)
			golden.Check(t, filepath.FromSlash(tt.golden), got, fmt.Sprintf("Render(example, %+v)", tt.opts))
			checkConfig(t, rendered)
		})
	}
}

// checkConfig runs "haproxy -c -f" on cfg.
func checkConfig(tb testing.TB, cfg []byte) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		tb.Fatal(err)
	}
	out, err := exec.Command(DefaultBinary, "-c", "-f", path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Configuration file is valid") {
		tb.Fatalf("haproxy -c -f %s = got %v\n%s\nwant a valid configuration", path, err, out)
	}
}

// TestRenderDirectives pins the lines the front end depends on (docs/ha.md), so a
// golden update cannot silently drop one.
func TestRenderDirectives(t *testing.T) {
	inv := loadExample(t)
	got, err := Render(context.Background(), inv, Options{})
	if err != nil {
		t.Fatalf("Render(example) = got error %v, want nil", err)
	}
	got = restoreTLSDir(inv, got)
	for _, line := range []string{
		"  user haproxy\n  group haproxy\n  maxconn 20000\n",
		"  maxconn 10000\n",
		"  timeout check 1000\n",
		"  timeout connect 100\n",
		"  stats socket /run/haproxy/admin.sock expose-fd listeners level admin mode 600\n",
		"defaults repool\n  mode http\n",
		"  timeout tunnel 3600000\n",
		"  bind 10.0.0.100:9090 name vip crt /etc/haproxy/tls/vip.pem ssl alpn h2 transparent ssl-min-ver TLSv1.2\n",
		"  monitor-uri /lb-health\n", "  http-request use-service prometheus-exporter if { path /metrics }\n",
		"  option httpchk\n",
		"  http-check send meth GET uri /readyz/active\n",
		"  http-check expect rstatus ^(200|404)$\n",
		"  http-check disable-on-404\n",
		"  server repool1 10.0.0.21:9090 ",
		" ssl ", " ca-file /etc/haproxy/tls/ca.crt ", " verify required ", " verifyhost repool.internal\n", " sni str(repool.internal) ",
		" alpn h2 ", " check-ssl ", " check-sni repool.internal ", " check-alpn http/1.1 ", " check-proto h1 ", " port 8081 ",
		" crt /etc/haproxy/tls/haproxy-client.pem ",
		" fall 3 inter 100 ", " rise 1 ", " error-limit 1 ", " observe layer4 on-error mark-down ",
		" agent-check ", " agent-send repool-agent ", " agent-inter 25 ", " agent-port 8081 ",
		// The database tier: TCP to the node whose Patroni says it is the
		// primary; sessions cut when a node is marked down.
		"frontend postgres\n  mode tcp\n  bind 10.0.0.100:5432 name vip-postgres transparent\n  default_backend postgres_primary\n",
		"backend postgres_primary\n  mode tcp\n  option httpchk\n  http-check send meth GET uri /primary\n  http-check expect status 200\n",
		"  server pg1 10.0.0.31:5432 check fall 2 inter 250 on-marked-down shutdown-sessions port 8008 rise 1\n",
		// A host cut off (no server alive, no other LB host reachable)
		// fails the monitor Keepalived tracks, and gives up the VIP.
		"  monitor fail if !{ srv_is_up(repool/repool1) } !{ srv_is_up(repool/repool2) } !{ srv_is_up(repool/repool3) } { nbsrv(lb_peers) lt 2 }\n",
		"backend lb_peers\n  mode tcp\n  server lb1 10.0.0.11:8404 check fall 2 inter 200 rise 1\n  server lb2 10.0.0.12:8404 check fall 2 inter 200 rise 1\n",
	} {
		if !strings.Contains(string(got), line) {
			t.Errorf("Render(example) = got\n%s\nwant it to contain %q", got, line)
		}
	}
	// Debian's unit passes -p: a pidfile in the file too is an ALERT at
	// every start.
	if strings.Contains(string(got), "pidfile") {
		t.Errorf("Render(example) without Options.PIDFile = got a pidfile line, want none:\n%s", got)
	}
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		name   string
		change func(*inventory.Inventory)
		opts   Options
		err    error  // wrapped, if set
		text   string // in the message
	}{
		{"invalid inventory", func(i *inventory.Inventory) { i.VIP.RouterID = 0 }, Options{}, inventory.ErrInvalid, "vip.router_id"},
		{"unknown host", func(*inventory.Inventory) {}, Options{Host: "lb9"}, inventory.ErrInvalid, "lb9"},
		{"hosts differ", func(i *inventory.Inventory) { i.LBHosts[1].MonitorPort = 8405 }, Options{}, ErrHostsDiffer, ""},
		{"hosts differ, per host is fine", func(i *inventory.Inventory) { i.LBHosts[1].MonitorPort = 8405 }, Options{Host: "lb2"}, nil, ""},
		{"no haproxy binary", func(*inventory.Inventory) {}, Options{Binary: "/nonexistent/haproxy"}, nil, "haproxy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := loadExample(t)
			tt.change(inv)
			_, err := Render(context.Background(), inv, tt.opts)
			wantErr := tt.err != nil || tt.text != ""
			switch {
			case !wantErr && err != nil:
				t.Fatalf("Render() = got error %v, want nil", err)
			case wantErr && err == nil:
				t.Fatalf("Render() = got nil error, want %v %q", tt.err, tt.text)
			case tt.err != nil && !errors.Is(err, tt.err):
				t.Fatalf("Render() = got error %v, want %v", err, tt.err)
			case !strings.Contains(errString(err), tt.text):
				t.Fatalf("Render() = got error %v, want it to mention %q", err, tt.text)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestRenderConcurrent renders in parallel: each call has its own file and
// transactions directory.
func TestRenderConcurrent(t *testing.T) {
	inv := loadExample(t)
	want, err := Render(context.Background(), inv, Options{})
	if err != nil {
		t.Fatalf("Render(example) = got error %v, want nil", err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			got, err := Render(context.Background(), inv, Options{})
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("concurrent Render(example) = got %v and a different file, want the same file", err)
			}
		})
	}
	wg.Wait()
}

// TestRenderGroups renders the example with its third server moved to a
// group of its own: one backend per group, each with the health check,
// and the tenant rule in the gRPC frontend naming the inventory's map file
// (the real HAProxy checks the result against an empty map there); and
// one control-plane backend per group, on the servers' HTTP ports, each
// server tracking its gRPC twin, chosen by the tenant in the path.
func TestRenderGroups(t *testing.T) {
	inv := loadExample(t)
	inv.Servers[2].Group = "big"
	inv.HAProxy.TenantMap = filepath.Join(filepath.Dir(inv.TLS.Cert), "tenants.map")
	rendered, err := Render(context.Background(), inv, Options{})
	if err != nil {
		t.Fatalf("Render(two groups) = got error %v, want nil", err)
	}
	got := string(rendered)
	for _, want := range []string{
		"  use_backend %[req.hdr(x-repool-tenant),map(" + inv.HAProxy.TenantMap + ",repool)]\n  default_backend repool\n",
		"\nbackend repool\n  mode http\n  option redispatch -1\n  option httpchk\n  http-check send meth GET uri /readyz/active\n  http-check expect rstatus ^(200|404)$\n  http-check disable-on-404\n  http-request return status 503 content-type text/plain string \"repool front end: ",
		// Each group's backend answers "cluster down" when none of its
		// own servers is alive.
		" if !{ srv_is_up(repool/repool1) } !{ srv_is_up(repool/repool2) }\n  server repool1 ",
		"\n  server repool2 ",
		"\nbackend repool_big\n  mode http\n  option redispatch -1\n  option httpchk\n  http-check send meth GET uri /readyz/active\n  http-check expect rstatus ^(200|404)$\n  http-check disable-on-404\n  http-request return status 503 content-type text/plain string \"repool front end: ",
		" if !{ srv_is_up(repool_big/repool3) }\n  server repool3 ",
		"  http-request deny deny_status 404 unless { path_beg /api/v1/ }\n  use_backend control_%[path,field(5,/),map(" + inv.HAProxy.TenantMap + ",repool)]\n  default_backend control_repool\n",
		"\nbackend control_repool_big\n  mode http\n  option redispatch -1\n  option httpchk\n  http-check disable-on-404\n  server repool3 10.0.0.23:8081 ",
		" track repool_big/repool3 ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Render(two groups) = got\n%s\nwant it to contain %q", got, want)
		}
	}
	if n := strings.Count(got, "  server repool"); n != 6 {
		t.Errorf("Render(two groups) has %d repool server lines, want 6 (each server in its group's backend and control backend)", n)
	}
	if strings.Contains(got, os.TempDir()+"/repool-haproxy-render-") {
		t.Errorf("Render(two groups) = got\n%s\nwant no trace of the render's temporary map", got)
	}
	if err := os.WriteFile(inv.HAProxy.TenantMap, []byte("t1 repool_big\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	checkConfig(t, rendered)
}

func TestBackendFor(t *testing.T) {
	for _, tt := range []struct{ group, backend string }{{"default", "repool"}, {"big", "repool_big"}, {"a-1", "repool_a-1"}} {
		if got := BackendFor(tt.group); got != tt.backend {
			t.Errorf("BackendFor(%q) = got %q, want %q", tt.group, got, tt.backend)
		}
		if g, ok := GroupOf(tt.backend); !ok || g != tt.group {
			t.Errorf("GroupOf(%q) = got %q, %v, want %q, true", tt.backend, g, ok, tt.group)
		}
	}
	for _, b := range []string{"", "grpc", "repool_", "repool_default", "repool_Big", "repoolx", "other_big"} {
		if g, ok := GroupOf(b); ok {
			t.Errorf("GroupOf(%q) = got %q, true, want false", b, g)
		}
	}
}
