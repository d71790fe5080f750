package topology

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/repool/repool/internal/lb/golden"
)

func TestHAProxyConfigGolden(t *testing.T) {
	tests := []struct {
		name    string
		servers []haBackend
	}{
		{"ha-pair", []haBackend{{Name: "us-s1", Addr: "127.0.0.1:9001", Check: 8001}, {Name: "us-s2", Addr: "127.0.0.1:9002", Check: 8002}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := renderHAProxy("us", "/tmp/rlt-x/us.sock", "127.0.0.1:7000", tt.servers)
			if err != nil {
				t.Fatalf("renderHAProxy() = %v", err)
			}
			golden.Check(t, filepath.Join("testdata", "haproxy-"+tt.name+".golden"), []byte(got), "renderHAProxy()")
			// The real validator.
			cfg := filepath.Join(t.TempDir(), "haproxy.cfg")
			if err := os.WriteFile(cfg, []byte(got), 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(haproxyBin(), "-c", "-f", cfg).CombinedOutput(); err != nil {
				t.Errorf("haproxy -c = %v\n%s", err, out)
			}
		})
	}
}

// TestHAProxyGroupsConfigGolden renders the groups' configuration (one
// backend per group, the tenant rule on the map file) and has the real
// HAProxy check it against an empty map file, as the topology writes one
// before HAProxy starts.
func TestHAProxyGroupsConfigGolden(t *testing.T) {
	groups := []haGroup{
		{Backend: "repool", Servers: []haBackend{{Name: "default-s1", Addr: "127.0.0.1:9001", Check: 8001}}},
		{Backend: "repool_solo", Servers: []haBackend{{Name: "solo-s1", Addr: "127.0.0.1:9002", Check: 8002}}},
	}
	dir := t.TempDir()
	mapFile := filepath.Join(dir, "repool-tenants.map")
	if err := os.WriteFile(mapFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := renderHAProxyGroups("/tmp/rlt-x/groups.sock", "127.0.0.1:7000", "/tmp/rlt-x/repool-tenants.map", groups)
	if err != nil {
		t.Fatalf("renderHAProxyGroups() = %v", err)
	}
	golden.Check(t, filepath.Join("testdata", "haproxy-groups.golden"), []byte(got), "renderHAProxyGroups()")
	if !strings.Contains(got, "use_backend %[req.hdr(x-repool-tenant),map(/tmp/rlt-x/repool-tenants.map,repool)]") {
		t.Errorf("renderHAProxyGroups() has no tenant rule on the map file:\n%s", got)
	}
	real, err := renderHAProxyGroups(filepath.Join(dir, "groups.sock"), "127.0.0.1:7000", mapFile, groups)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(real), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(haproxyBin(), "-c", "-f", cfg).CombinedOutput(); err != nil {
		t.Errorf("haproxy -c = %v\n%s", err, out)
	}
}
