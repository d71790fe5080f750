package topology

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	lbhaproxy "github.com/repool/repool/internal/lb/haproxy"
)

// productionConfig is the checked-in render of the example inventory
// (haproxy/inventory.yaml): the configuration users get. internal/lb's
// tests keep it equal to a fresh render.
const productionConfig = "../../haproxy/haproxy.cfg"

// tlsServerParams are the server keywords of a TLS render (the example's)
// that the topology's plaintext render lacks; it has "proto h2" instead.
// docs/loadtest.md lists the override.
var tlsServerParams = []string{"ssl", "check-ssl", "alpn", "ca-file", "check-alpn", "check-sni", "crt", "sni", "ssl-min-ver", "verify", "verifyhost"}

// perServerParams are the server keywords whose values name the server
// itself: its HTTP port (checks and agent) and the server it tracks.
var perServerParams = []string{"port", "agent-port", "track"}

// serverFlags are the server keywords that take no value.
var serverFlags = []string{"agent-check", "check", "check-ssl", "ssl", "backup", "no-check", "send-proxy", "no-ssl"}

// section is one section of an HAProxy configuration: its header ("backend
// repool") and its lines, trimmed, comments left out.
type section struct {
	name  string
	lines []string
}

func parseConfig(tb testing.TB, text string) map[string]section {
	tb.Helper()
	out := map[string]section{}
	var cur *section
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\n")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		if line[0] != ' ' && line[0] != '\t' {
			if cur != nil {
				out[cur.name] = *cur
			}
			cur = &section{name: line}
			continue
		}
		if cur == nil {
			tb.Fatalf("line %q before any section", line)
		}
		cur.lines = append(cur.lines, strings.TrimSpace(line))
	}
	if cur != nil {
		out[cur.name] = *cur
	}
	return out
}

// serverLine is a parsed server line.
type serverLine struct {
	name, addr string
	params     map[string]string // flags map to ""
}

func parseServer(tb testing.TB, line string) serverLine {
	tb.Helper()
	f := strings.Fields(line)
	if len(f) < 3 || f[0] != "server" {
		tb.Fatalf("not a server line: %q", line)
	}
	s := serverLine{name: f[1], addr: f[2], params: map[string]string{}}
	for i := 3; i < len(f); i++ {
		if slices.Contains(serverFlags, f[i]) {
			s.params[f[i]] = ""
			continue
		}
		if i+1 == len(f) {
			tb.Fatalf("server %s: keyword %q without a value in %q", s.name, f[i], line)
		}
		s.params[f[i]] = f[i+1]
		i++
	}
	return s
}

// splitBackend returns a backend's directives, with its own name put back
// to the production backend's (a directive may name its backend), and its
// server lines.
func splitBackend(tb testing.TB, sec section, name, prodName string) (directives []string, servers []serverLine) {
	tb.Helper()
	cond, hasCond := "", false
	for _, l := range sec.lines {
		if strings.HasPrefix(l, "server ") {
			servers = append(servers, parseServer(tb, l))
			continue
		}
		// The cluster-down rule names the backend's own servers, which
		// differ from production's: it is compared apart (below).
		if i := strings.Index(l, " if "); strings.HasPrefix(l, "http-request return ") && i >= 0 {
			l, cond, hasCond = l[:i]+" if NO-SERVER-OF-THE-BACKEND-ALIVE", l[i+len(" if "):], true
		}
		directives = append(directives, strings.ReplaceAll(l, name, prodName))
	}
	if hasCond {
		var want []string
		for _, s := range servers {
			want = append(want, "!{ srv_is_up("+name+"/"+s.name+") }")
		}
		if w := strings.Join(want, " "); cond != w {
			tb.Errorf("backend %s: the cluster-down rule's condition = got %q, want %q (none of its servers alive)", name, cond, w)
		}
	}
	return directives, servers
}

// renderLoopback renders the topology's configuration for servers, with
// fixed ports and paths, through the same code the topology runs.
func renderLoopback(t *testing.T, name string, servers []lbServer) (string, string) {
	t.Helper()
	// Not t.TempDir(): a subtest's name may put a character in it that
	// the inventory refuses in a path.
	dir, err := os.MkdirTemp("", "rlt-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	usr, grp, err := currentUser()
	if err != nil {
		t.Fatal(err)
	}
	f := lbFront{Name: name, Sock: filepath.Join(dir, name+".sock"), GRPC: 7000, Control: 7001, Monitor: 7002,
		TenantMap: filepath.Join(dir, "repool-tenants.map"), User: usr, Group: grp}
	inv, err := lbInventory(f, servers)
	if err != nil {
		t.Fatalf("lbInventory() = %v", err)
	}
	path := filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(path, []byte(inv), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := renderHAProxy(context.Background(), path)
	if err != nil {
		t.Fatalf("renderHAProxy() = %v\ninventory:\n%s", err, inv)
	}
	if err := os.WriteFile(f.TenantMap, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg, f.TenantMap
}

// TestHAProxyConfigIsProduction renders the topology's HAProxy
// configuration (an HA pair, a single SQLite server, and groups) and
// checks it against the production render of the example inventory
// (haproxy/haproxy.cfg): the defaults section is the same, every group's
// backend and control backend has production's backend directives, and
// every server line production's server settings, but for the loopback
// overrides docs/loadtest.md lists: the addresses and ports, and plaintext
// (h2c: "proto h2" in place of the TLS settings). Then the real HAProxy
// checks the file.
func TestHAProxyConfigIsProduction(t *testing.T) {
	rawProd, err := os.ReadFile(productionConfig)
	if err != nil {
		t.Fatal(err)
	}
	prod := parseConfig(t, string(rawProd))
	prodDirectives := map[string][]string{}
	prodServer := map[string]serverLine{}
	for _, b := range []string{lbhaproxy.Backend, lbhaproxy.ControlBackendFor("default")} {
		sec, ok := prod["backend "+b]
		if !ok {
			t.Fatalf("%s has no backend %s", productionConfig, b)
		}
		d, s := splitBackend(t, sec, b, b)
		if len(s) == 0 {
			t.Fatalf("%s: backend %s has no server", productionConfig, b)
		}
		prodDirectives[b], prodServer[b] = d, s[0]
	}

	tests := []struct {
		name    string
		servers []lbServer
	}{
		{"ha-pair", []lbServer{{Name: "us-s1", GRPC: "127.0.0.1:9001", HTTP: 8001}, {Name: "us-s2", GRPC: "127.0.0.1:9002", HTTP: 8002}}},
		{"sqlite", []lbServer{{Name: "us-s1", GRPC: "127.0.0.1:9001", HTTP: 8001}}},
		{"groups", []lbServer{{Name: "default-s1", GRPC: "127.0.0.1:9001", HTTP: 8001, Group: "default"}, {Name: "solo-s1", GRPC: "127.0.0.1:9002", HTTP: 8002, Group: "solo"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, mapFile := renderLoopback(t, "us", tt.servers)
			if !strings.HasPrefix(got, lbhaproxy.Header) {
				t.Errorf("the configuration does not start with internal/lb/haproxy's Header:\n%s", got)
			}
			cfg := parseConfig(t, got)
			if g, w := cfg["defaults "+lbhaproxy.Defaults].lines, prod["defaults "+lbhaproxy.Defaults].lines; !slices.Equal(g, w) {
				t.Errorf("defaults section = got\n\t%s\nwant production's\n\t%s", strings.Join(g, "\n\t"), strings.Join(w, "\n\t"))
			}
			for _, s := range tt.servers {
				group := s.Group
				if group == "" {
					group = "default"
				}
				for _, b := range []struct{ backend, prod, addr, track string }{
					{lbhaproxy.BackendFor(group), lbhaproxy.Backend, s.GRPC, ""},
					{lbhaproxy.ControlBackendFor(group), lbhaproxy.ControlBackendFor("default"), fmt.Sprintf("127.0.0.1:%d", s.HTTP), lbhaproxy.BackendFor(group) + "/" + s.Name},
				} {
					sec, ok := cfg["backend "+b.backend]
					if !ok {
						t.Errorf("no backend %s:\n%s", b.backend, got)
						continue
					}
					directives, servers := splitBackend(t, sec, b.backend, b.prod)
					if w := prodDirectives[b.prod]; !slices.Equal(directives, w) {
						t.Errorf("backend %s = got\n\t%s\nwant production's (backend %s)\n\t%s", b.backend, strings.Join(directives, "\n\t"), b.prod, strings.Join(w, "\n\t"))
					}
					i := slices.IndexFunc(servers, func(v serverLine) bool { return v.name == s.Name })
					if i < 0 {
						t.Errorf("backend %s has no server %s", b.backend, s.Name)
						continue
					}
					checkServer(t, b.backend, servers[i], prodServer[b.prod], b.addr, s.HTTP, b.track)
				}
			}
			if tt.name == "groups" {
				want := "use_backend " + lbhaproxy.TenantRule(mapFile)
				if !slices.Contains(cfg["frontend "+lbhaproxy.GRPCFrontend].lines, want) {
					t.Errorf("frontend %s has no %q:\n%s", lbhaproxy.GRPCFrontend, want, got)
				}
			}
			// The real validator, with the real (empty) tenant map.
			path := filepath.Join(filepath.Dir(mapFile), "haproxy.cfg")
			if err := os.WriteFile(path, []byte(got), 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(haproxyBin(), "-c", "-f", path).CombinedOutput(); err != nil {
				t.Errorf("haproxy -c = %v\n%s", err, out)
			}
		})
	}
}

// checkServer compares a server line of the topology's render with
// production's (prod), allowing only the documented loopback overrides.
func checkServer(t *testing.T, backend string, got, prod serverLine, addr string, httpPort int, track string) {
	t.Helper()
	where := "backend " + backend + " server " + got.name
	if got.addr != addr {
		t.Errorf("%s: address %s, want %s", where, got.addr, addr)
	}
	for _, k := range perServerParams {
		_, inProd := prod.params[k]
		v, in := got.params[k]
		if in != inProd {
			t.Errorf("%s: has %s: %v, production: %v", where, k, in, inProd)
			continue
		}
		want := map[string]string{"port": fmt.Sprint(httpPort), "agent-port": fmt.Sprint(httpPort), "track": track}[k]
		if in && v != want {
			t.Errorf("%s: %s %s, want %s", where, k, v, want)
		}
	}
	for k, w := range prod.params {
		if slices.Contains(perServerParams, k) || slices.Contains(tlsServerParams, k) {
			continue
		}
		if v, ok := got.params[k]; !ok || v != w {
			t.Errorf("%s: %s = %q (present: %v), want production's %q", where, k, v, ok, w)
		}
	}
	for k, v := range got.params {
		if _, ok := prod.params[k]; ok || slices.Contains(perServerParams, k) {
			continue
		}
		// Plaintext: HAProxy speaks h2c to the data backend's servers,
		// where production's TLS negotiates h2 by ALPN.
		if k == "proto" && v == "h2" && prod.params["alpn"] == "h2" {
			continue
		}
		t.Errorf("%s: %s %q, which production's server line does not have", where, k, v)
	}
	for _, k := range tlsServerParams {
		if _, ok := got.params[k]; ok {
			t.Errorf("%s: has %s: the topology is plaintext", where, k)
		}
	}
}

// TestScanHAProxyReportsEachChangeOnce: HAProxy in the foreground prints
// a state change on stderr and logs it to stdout (the production log
// target), and a control-plane server that tracks it changes too; one
// event comes out.
func TestScanHAProxyReportsEachChangeOnce(t *testing.T) {
	out := `[WARNING]  (1959) : Server repool/us-s1 is DOWN, reason: Layer4 connection problem, info: "Connection refused", check duration: 0ms. 0 active and 0 backup servers left.
Server repool/us-s1 is DOWN, reason: Layer4 connection problem, info: "Connection refused", check duration: 0ms. 0 active and 0 backup servers left.
[WARNING]  (1959) : Server control_repool/us-s1 is DOWN via repool/us-s1. 0 active and 0 backup servers left.
Server control_repool/us-s1 is DOWN via repool/us-s1. 0 active and 0 backup servers left.
[WARNING]  (1959) : Server repool_solo/solo-s1 is stopping, reason: Layer7 check conditionally passed, code: 404, check duration: 1ms.
[ALERT]    (1959) : backend 'repool' has no server available!
`
	logf, err := os.Create(filepath.Join(t.TempDir(), "haproxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	scanHAProxy(strings.NewReader(out), logf, []string{"repool", "repool_solo"}, func(s string) { events = append(events, s) })
	want := []string{"haproxy: us-s1 is DOWN (Layer4 connection problem)", "haproxy: solo-s1 is NOLB (standby) (Layer7 check conditionally passed, 404)"}
	if !slices.Equal(events, want) {
		t.Errorf("events = got %q, want %q", events, want)
	}
}
