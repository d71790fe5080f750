package lb

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/repool/repool/internal/lb/golden"
	"github.com/repool/repool/internal/lb/haproxy"
	"github.com/repool/repool/internal/lb/haproxy/haproxytest"
	"github.com/repool/repool/internal/lb/inventory"
	"github.com/repool/repool/internal/lb/keepalived"
	"github.com/repool/repool/internal/lb/tenantmap"
	"github.com/repool/repool/internal/testenv"
	"github.com/repool/repool/internal/tlsconf/tlstest"
)

const exampleInventory = "../../haproxy/inventory.yaml"

// run calls Command and returns its stdout and stderr.
func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = Command(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), err
}

// TestCheckedInConfigs renders the example inventory the way the checked-in
// files say they were made and compares: they never go stale. -update
// rewrites them. The same files are the golden files of the haproxy and
// keepalived packages' Render tests; this test checks that the commands'
// flags reach Render and --out writes its output unchanged.
func TestCheckedInConfigs(t *testing.T) {
	inv, tlsDir := exampleWithTLSFiles(t)
	tests := []struct {
		file string // checked in, relative to the repository root
		args []string
	}{
		{"haproxy/haproxy.cfg", []string{"haproxy", "render", "--inventory", inv}},
		{"keepalived/keepalived-lb1.conf", []string{"keepalived", "render", "--inventory", inv, "--host", "lb1"}},
		{"keepalived/keepalived-lb2.conf", []string{"keepalived", "render", "--inventory", inv, "--host", "lb2"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), filepath.Base(tt.file))
			if _, stderr, err := run(t, append(tt.args, "--out", out)...); err != nil {
				t.Fatalf("Command(%q) = got error %v (stderr %q), want nil", tt.args, err, stderr)
			}
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			got = bytes.ReplaceAll(got, []byte(tlsDir), []byte(exampleTLSDir))
			golden.Check(t, filepath.Join("../..", tt.file), got, fmt.Sprintf("Command(%q)", tt.args))
		})
	}
}

// exampleTLSDir holds the example inventory's certificates on an LB host.
const exampleTLSDir = "/etc/haproxy/tls/"

// exampleWithTLSFiles writes a copy of the example inventory whose TLS
// files are real ones (from a private CA) in a temporary directory, so
// that the render's "haproxy -c" can load them. It returns the copy's path
// and the directory that stands for exampleTLSDir (with a trailing slash).
func exampleWithTLSFiles(t *testing.T) (string, string) {
	t.Helper()
	raw, err := os.ReadFile(exampleInventory)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir() + "/"
	ca := tlstest.NewCA(t, "example CA")
	for name, content := range map[string][]byte{
		"vip.pem": ca.Issue("vip", "repool.internal").PEM(), "ca.crt": ca.PEM, "haproxy-client.pem": ca.Issue("haproxy").PEM(),
	} {
		if err := os.WriteFile(dir+name, content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := dir + "inventory.yaml"
	if err := os.WriteFile(path, bytes.ReplaceAll(raw, []byte(exampleTLSDir), []byte(dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, dir
}

// TestCommandUsage: help asked for, on a tool or on any command, goes to
// stdout (flag.ErrHelp for -h, which cmd/server turns into exit status 0)
// and names the command's flags.
func TestCommandUsage(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr error    // nil or flag.ErrHelp
		want    []string // in stdout
	}{
		{"no arguments", nil, nil, []string{"usage:", "haproxy render", "keepalived render"}},
		{"help", []string{"help"}, nil, []string{"usage:", "haproxy drain|ready|maint"}},
		{"-h", []string{"-h"}, nil, []string{"usage:"}},
		{"haproxy -h", []string{"haproxy", "-h"}, flag.ErrHelp, []string{"usage:", "haproxy status --socket PATH"}},
		{"haproxy --help", []string{"haproxy", "--help"}, flag.ErrHelp, []string{"usage:"}},
		{"haproxy help", []string{"haproxy", "help"}, nil, []string{"usage:"}},
		{"keepalived -h", []string{"keepalived", "-h"}, flag.ErrHelp, []string{"keepalived render --inventory FILE --host NAME"}},
		{"haproxy render -h", []string{"haproxy", "render", "-h"}, flag.ErrHelp, []string{"usage: " + Prog + " haproxy render", "-inventory", "-host", "-out", "-pid-file"}},
		{"keepalived render --help", []string{"keepalived", "render", "--help"}, flag.ErrHelp, []string{"usage: " + Prog + " keepalived render", "-inventory", "-host", "-out"}},
		{"haproxy status -h", []string{"haproxy", "status", "-h"}, flag.ErrHelp, []string{"usage: " + Prog + " haproxy status", "-socket"}},
		{"haproxy drain -h", []string{"haproxy", "drain", "-h"}, flag.ErrHelp, []string{"usage: " + Prog + " haproxy drain NAME", "-socket", "-force"}},
		{"haproxy ready --help", []string{"haproxy", "ready", "--help"}, flag.ErrHelp, []string{"usage: " + Prog + " haproxy ready NAME", "-socket"}},
		{"haproxy maint -h", []string{"haproxy", "maint", "-h"}, flag.ErrHelp, []string{"usage: " + Prog + " haproxy maint NAME", "-socket", "-force"}},
		{"haproxy sync-placements -h", []string{"haproxy", "sync-placements", "-h"}, flag.ErrHelp, []string{"usage: " + Prog + " haproxy sync-placements", "-inventory", "-host", "-store", "-interval", "-once", "-file-only", "(default 200ms)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, err := run(t, tt.args...)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Command(%q) = got error %v, want %v", tt.args, err, tt.wantErr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("Command(%q) = got stdout %q, want it to contain %q", tt.args, stdout, w)
				}
			}
			if stderr != "" {
				t.Errorf("Command(%q) = got stderr %q, want nothing: help asked for goes to stdout", tt.args, stderr)
			}
		})
	}
}

func TestCommandErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	raw, err := os.ReadFile(exampleInventory)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, bytes.Replace(raw, []byte("router_id: 51"), []byte("router_id: 300"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		err  error  // wrapped, if set
		text string // in the message
	}{
		{"unknown tool", []string{"nginx", "render"}, nil, `unknown command "nginx render": want haproxy or keepalived`},
		{"unknown command", []string{"haproxy", "reload"}, nil, `unknown command "haproxy reload": haproxy commands are render, status, drain, ready, maint`},
		{"unknown keepalived command", []string{"keepalived", "status"}, nil, `unknown command "keepalived status": keepalived commands are render`},
		{"missing command", []string{"haproxy"}, nil, "haproxy: missing command: want render, status, drain, ready, maint"},
		{"no inventory", []string{"haproxy", "render"}, nil, "--inventory is required"},
		{"missing inventory", []string{"haproxy", "render", "--inventory", "/nonexistent.yaml"}, nil, "nonexistent.yaml"},
		{"bad inventory", []string{"haproxy", "render", "--inventory", bad}, inventory.ErrInvalid, "vip.router_id"},
		{"keepalived without host", []string{"keepalived", "render", "--inventory", exampleInventory}, nil, "--host is required"},
		{"keepalived unknown host", []string{"keepalived", "render", "--inventory", exampleInventory, "--host", "lb7"}, inventory.ErrInvalid, "lb7"},
		{"haproxy unknown host", []string{"haproxy", "render", "--inventory", exampleInventory, "--host", "lb7"}, inventory.ErrInvalid, "lb7"},
		{"stray argument", []string{"haproxy", "render", "--inventory", exampleInventory, "extra"}, nil, "unexpected arguments"},
		{"drain without name", []string{"haproxy", "drain", "--socket", "/nonexistent.sock"}, nil, "exactly one server NAME"},
		{"socket missing", []string{"haproxy", "status", "--socket", "/nonexistent.sock"}, haproxy.ErrRuntime, "/nonexistent.sock"},
		{"sync without host", []string{"haproxy", "sync-placements", "--inventory", exampleInventory, "--store", "x"}, nil, "--host is required"},
		{"sync without store", []string{"haproxy", "sync-placements", "--inventory", exampleInventory, "--host", "lb1"}, nil, "--store is required"},
		{"sync bad interval", []string{"haproxy", "sync-placements", "--inventory", exampleInventory, "--host", "lb1", "--store", "x", "--interval", "0s"}, nil, "--interval 0s is not positive"},
		{"sync once and file-only", []string{"haproxy", "sync-placements", "--inventory", exampleInventory, "--host", "lb1", "--store", "x", "--once", "--file-only"}, nil, "exclude each other"},
		{"sync unknown host", []string{"haproxy", "sync-placements", "--inventory", exampleInventory, "--host", "lb7", "--store", "x"}, inventory.ErrInvalid, "lb7"},
		{"check without url", []string{"keepalived", "check"}, nil, "--url is required"},
		{"check bad every", []string{"keepalived", "check", "--url", "http://127.0.0.1:1/lb-health", "--every", "0s"}, nil, "--every 0s is not positive"},
		{"check negative for", []string{"keepalived", "check", "--url", "http://127.0.0.1:1/lb-health", "--for", "-1s"}, nil, "--for -1s is negative"},
		{"check on a closed port", []string{"keepalived", "check", "--url", "http://127.0.0.1:1/lb-health"}, keepalived.ErrCheck, "connection refused"},
		{"sync without a placement source", []string{"haproxy", "sync-placements", "--inventory", exampleInventory, "--host", "lb1", "--store", "x"}, nil, "no placement source"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, _, err := run(t, tt.args...)
			if err == nil || (tt.err != nil && !errors.Is(err, tt.err)) || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("Command(%q) = got error %v, want one wrapping %v that says %q", tt.args, err, tt.err, tt.text)
			}
			if stdout != "" {
				t.Errorf("Command(%q) = got stdout %q, want nothing on error", tt.args, stdout)
			}
		})
	}
}

// TestKeepalivedCheck: the track script succeeds on a monitor answering
// 200 and fails on one answering 503 (HAProxy's monitor fail).
func TestKeepalivedCheck(t *testing.T) {
	status := http.StatusOK
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.WriteHeader(status)
	}))
	defer srv.Close()
	if _, _, err := run(t, "keepalived", "check", "--url", srv.URL+"/lb-health", "--for", "0s"); err != nil {
		t.Fatalf("keepalived check on a monitor answering 200 = got error %v, want nil", err)
	}
	mu.Lock()
	status = http.StatusServiceUnavailable
	mu.Unlock()
	if _, _, err := run(t, "keepalived", "check", "--url", srv.URL+"/lb-health", "--for", "0s"); !errors.Is(err, keepalived.ErrCheck) || !strings.Contains(err.Error(), "503") {
		t.Fatalf("keepalived check on a monitor answering 503 = got error %v, want ErrCheck naming the 503", err)
	}
}

// TestRenderOutChangesNothingOnError: a failed render leaves --out as it was.
func TestRenderOutChangesNothingOnError(t *testing.T) {
	out := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(out, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, "haproxy", "render", "--inventory", exampleInventory, "--host", "nosuch", "--out", out); err == nil {
		t.Fatalf("Command(haproxy render --host nosuch) = got nil error, want one")
	}
	got, err := os.ReadFile(out)
	if err != nil || string(got) != "old\n" {
		t.Errorf("--out after a failed render = got %q (%v), want the old content", got, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(out))
	if len(entries) != 1 {
		t.Errorf("directory of --out = got %d entries, want only the old file (no temporary left)", len(entries))
	}
}

func TestRenderOut(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "keepalived.conf")
	stdout, _, err := run(t, "keepalived", "render", "--host", "lb1", "--inventory", exampleInventory, "--out", out)
	if err != nil || stdout != "" {
		t.Fatalf("Command(keepalived render --out) = got %v, stdout %q, want nil and nothing on stdout", err, stdout)
	}
	fi, err := os.Stat(out)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("keepalived.conf = got %v (%v), want mode 0600 (it holds the VRRP password)", fi, err)
	}
	inv, _ := exampleWithTLSFiles(t)
	stdout, _, err = run(t, "haproxy", "render", "--inventory", inv, "--pid-file", "/run/x.pid")
	if err != nil || !strings.Contains(stdout, "pidfile /run/x.pid\n") {
		t.Errorf("Command(haproxy render --pid-file) = got %v, stdout\n%s\nwant pidfile /run/x.pid", err, stdout)
	}
}

// TestRuntimeCommands runs status, drain, maint and ready against a real
// HAProxy in front of fake servers.
func TestRuntimeCommands(t *testing.T) {
	p := haproxytest.StartTrio(t)
	haproxytest.WaitStatus(t, p.Runtime, map[string]string{"active": "UP", "standby": "NOLB", "broken": "DOWN"})

	stdout, _, err := run(t, "haproxy", "status", "--socket", p.Socket)
	if err != nil {
		t.Fatalf("Command(haproxy status) = got error %v, want nil", err)
	}
	for _, re := range []string{
		`(?m)^SERVER +ADDRESS +STATE +ADMIN +CHECK +WEIGHT +HAPROXY STATUS$`,
		`(?m)^active +127\.0\.0\.1:\d+ +UP +ready +L7OK(/200)? +1 +UP$`,
		// The standby's agent sets its weight to 0; the broken server's
		// agent said down (package agent), maybe before its first health
		// check ended (INI: the agent checks more often).
		`(?m)^standby +127\.0\.0\.1:\d+ +NOLB +ready +L7OKC(/404)? +[01] +NOLB$`,
		`(?m)^broken +127\.0\.0\.1:\d+ +DOWN +ready +(L7STS(/503)?|INI) +1 +DOWN( \(agent\))?$`,
	} {
		if !regexp.MustCompile(re).MatchString(stdout) {
			t.Errorf("Command(haproxy status) = got\n%s\nwant a line matching %s", stdout, re)
		}
	}

	tests := []struct {
		name   string
		args   []string
		err    error
		text   string // in the error's message
		stdout string
		want   map[string]string
	}{
		{"drain last UP", []string{"haproxy", "drain", "active", "--socket", p.Socket}, haproxy.ErrLastUp, "--force does it anyway", "", map[string]string{"active": "UP/ready"}},
		{"maint last UP", []string{"haproxy", "maint", "--socket", p.Socket, "active"}, haproxy.ErrLastUp, "--force does it anyway", "", map[string]string{"active": "UP/ready"}},
		{"unknown server", []string{"haproxy", "maint", "nosuch", "--socket", p.Socket}, haproxy.ErrUnknownServer, "nosuch", "", nil},
		{"maint DOWN server", []string{"haproxy", "maint", "broken", "--socket", p.Socket}, nil, "", "repool/broken: maint\n", map[string]string{"broken": "MAINT/maint"}},
		{"drain last UP forced", []string{"haproxy", "drain", "active", "--force", "--socket", p.Socket}, nil, "", "repool/active: drain\n", map[string]string{"active": "DRAIN/drain"}},
		{"ready", []string{"haproxy", "ready", "active", "--socket", p.Socket}, nil, "", "repool/active: ready\n", map[string]string{"active": "UP/ready"}},
		{"ready broken", []string{"haproxy", "ready", "broken", "--socket", p.Socket}, nil, "", "repool/broken: ready\n", map[string]string{"broken": "DOWN/ready"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, _, err := run(t, tt.args...)
			if (tt.err == nil) != (err == nil) || (tt.err != nil && !errors.Is(err, tt.err)) || (err != nil && !strings.Contains(err.Error(), tt.text)) {
				t.Fatalf("Command(%q) = got error %v, want one wrapping %v that says %q", tt.args, err, tt.err, tt.text)
			}
			if stdout != tt.stdout {
				t.Errorf("Command(%q) = got stdout %q, want %q", tt.args, stdout, tt.stdout)
			}
			haproxytest.WaitStatus(t, p.Runtime, tt.want)
		})
	}
}

// fakePlacements is the placement source of TestSyncPlacements.
type fakePlacements struct {
	mu sync.Mutex
	pl map[string]string
}

func (f *fakePlacements) Placements(context.Context) (map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.pl), nil
}

func (f *fakePlacements) set(pl map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pl = pl
}

// TestSyncPlacements runs "haproxy sync-placements" with a fake placement
// source against a real HAProxy with two groups: --file-only writes the
// map file alone, --once applies it, and the loop follows a move until
// its context ends. The control frontend routes by the same map: a request
// about a tenant reaches its group's active server, one about no tenant
// the default group's, nothing outside /api/v1/ is forwarded, and a server
// the gRPC backend does not send traffic to (standby, drained) gets no
// control-plane request either.
func TestSyncPlacements(t *testing.T) {
	def := haproxytest.NewServer(t, "def1", http.StatusOK)
	big := haproxytest.NewServer(t, "big1", http.StatusOK)
	big.Group = "big"
	dir := t.TempDir()
	inv := haproxytest.LoopbackInventory(t, dir, def, big)
	p := haproxytest.Start(t, inv, dir)
	haproxytest.WaitStatus(t, p.Runtime, map[string]string{"def1": "UP", "big1": "UP"})
	raw, err := yaml.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	invPath := filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(invPath, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	src := &fakePlacements{pl: map[string]string{"t1": "big", "t2": "default"}}
	var opened []string
	r := Runner{OpenPlacements: func(_ context.Context, store string) (tenantmap.Source, func() error, error) {
		opened = append(opened, store)
		return src, func() error { return nil }, nil
	}}
	runSync := func(ctx context.Context, extra ...string) (string, error) {
		var out, errOut bytes.Buffer
		args := append([]string{"haproxy", "sync-placements", "--inventory", invPath, "--host", "lb1", "--store", "fake://placements"}, extra...)
		err := r.Command(ctx, args, &out, &errOut)
		if out.Len() != 0 {
			t.Errorf("Command(%q) = got stdout %q, want nothing", args, out.String())
		}
		return errOut.String(), err
	}
	mapFile := func() string {
		b, _ := os.ReadFile(inv.HAProxy.TenantMap)
		return string(b)
	}
	want := tenantmap.Header + "t1 repool_big\n"

	if _, err := runSync(context.Background(), "--file-only"); err != nil {
		t.Fatalf("sync-placements --file-only = got error %v, want nil", err)
	}
	if got := mapFile(); got != want {
		t.Errorf("map file after --file-only = got %q, want %q", got, want)
	}
	if got := haproxytest.Call(t, inv, "t1"); got != "def1" {
		t.Errorf("t1's call after --file-only = answered by %s, want def1 (HAProxy not changed)", got)
	}
	if _, err := runSync(context.Background(), "--once"); err != nil {
		t.Fatalf("sync-placements --once = got error %v, want nil", err)
	}
	if got := haproxytest.Call(t, inv, "t1"); got != "big1" {
		t.Errorf("t1's call after --once = answered by %s, want big1", got)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := runSync(ctx, "--interval", "20ms")
		done <- err
	}()
	src.set(map[string]string{"t1": "default", "t2": "big"})
	testenv.Eventually(t, haproxytest.WaitFor, "the loop to apply the move", func() bool {
		return haproxytest.Call(t, inv, "t2") == "big1" && haproxytest.Call(t, inv, "t1") == "def1"
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("sync-placements loop ended by its context = got error %v, want nil", err)
	}
	if got, want := mapFile(), tenantmap.Header+"t2 repool_big\n"; got != want {
		t.Errorf("map file after the loop = got %q, want %q", got, want)
	}
	for _, s := range opened {
		if s != "fake://placements" {
			t.Errorf("OpenPlacements got store %q, want the --store flag", s)
		}
	}

	control := func(path string) string {
		code, body := haproxytest.Control(t, inv, path)
		if code != http.StatusOK {
			return strconv.Itoa(code)
		}
		return body
	}
	for path, want := range map[string]string{
		"/api/v1/tenants/t2/limits": "big1", "/api/v1/tenants/t2": "big1", "/api/v1/tenants/t1/keys": "def1",
		"/api/v1/tenants/unknown": "def1", "/api/v1/tenants": "def1", "/api/v1/groups": "def1",
		"/metrics": "404", "/readyz/active": "404",
	} {
		if got := control(path); got != want {
			t.Errorf("GET %s through the control frontend = answered by %s, want %s", path, got, want)
		}
	}
	// A standby (404: NOLB in its group's backend) gets no control-plane
	// request: the control backend's server tracks the gRPC backend's.
	big.SetStatus(http.StatusNotFound)
	haproxytest.WaitStatus(t, p.Runtime, map[string]string{"def1": "UP", "big1": "NOLB"})
	if got := control("/api/v1/tenants/t2/limits"); got != "503" {
		t.Errorf("GET t2's limits with big's only server a standby = %s, want 503 (no server)", got)
	}
	big.SetStatus(http.StatusOK)
	haproxytest.WaitStatus(t, p.Runtime, map[string]string{"def1": "UP", "big1": "UP"})
	testenv.Eventually(t, haproxytest.WaitFor, "the control backend to follow big1 back UP", func() bool {
		return control("/api/v1/tenants/t2/limits") == "big1"
	})

	stdout, _, err := run(t, "haproxy", "status", "--socket", p.Socket)
	if err != nil {
		t.Fatalf("Command(haproxy status) = got error %v, want nil", err)
	}
	for _, re := range []string{`(?m)^GROUP +SERVER +ADDRESS `, `(?m)^default +def1 +127\.0\.0\.1:\d+ +UP `, `(?m)^big +big1 +127\.0\.0\.1:\d+ +UP `} {
		if !regexp.MustCompile(re).MatchString(stdout) {
			t.Errorf("Command(haproxy status) with two groups = got\n%s\nwant a line matching %s", stdout, re)
		}
	}
	stdout, _, err = run(t, "haproxy", "drain", "big1", "--force", "--socket", p.Socket)
	if err != nil || stdout != "repool_big/big1: drain\n" {
		t.Errorf("Command(haproxy drain big1) = got %q, %v, want repool_big/big1: drain", stdout, err)
	}
	if got := control("/api/v1/tenants/t2/limits"); got != "503" {
		t.Errorf("GET t2's limits with big1 drained = %s, want 503: drain applies to the control backend too", got)
	}
}

// TestDescriptorWarning: the render warns when HAProxy with the
// inventory's maxconn would need more file descriptors than the hard limit
// allows (HAProxy then refuses to start), and names a maxconn that fits;
// it is silent when the limit is enough.
func TestDescriptorWarning(t *testing.T) {
	inv, err := loadInventory(exampleInventory)
	if err != nil {
		t.Fatal(err)
	}
	need := 2*uint64(inv.HAProxy.MaxConn) + 100
	if w := descriptorWarning(inv, need); w != "" {
		t.Errorf("descriptorWarning(limit %d = the need) = %q, want none", need, w)
	}
	w := descriptorWarning(inv, 20000)
	for _, part := range []string{"haproxy.maxconn 20000", "about 40100 file descriptors", "hard limit here is 20000", "lower haproxy.maxconn to 9950 or less", "LimitNOFILE=40100"} {
		if !strings.Contains(w, part) {
			t.Errorf("descriptorWarning(limit 20000) = %q, want it to contain %q", w, part)
		}
	}
	// The maxconn it names fits: no warning at that maxconn.
	inv.HAProxy.MaxConn = 9950
	if w := descriptorWarning(inv, 20000); w != "" {
		t.Errorf("descriptorWarning(maxconn 9950, limit 20000) = %q, want none", w)
	}
}
