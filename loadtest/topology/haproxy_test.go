package topology

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestHAProxyConfigGolden(t *testing.T) {
	tests := []struct {
		name    string
		servers []haBackend
	}{
		{"ha-pair", []haBackend{{Name: "us-s1", Addr: "127.0.0.1:9001", Check: 8001}, {Name: "us-s2", Addr: "127.0.0.1:9002", Check: 8002}}},
		{"sqlite-backup", []haBackend{{Name: "us-s1", Addr: "127.0.0.1:9001", Check: 8001}, {Name: "us-s2", Addr: "127.0.0.1:9002", Check: 8002, Backup: true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := renderHAProxy("us", "/tmp/rlt-x/us.sock", "127.0.0.1:7000", tt.servers)
			if err != nil {
				t.Fatalf("renderHAProxy() = %v", err)
			}
			golden := filepath.Join("testdata", "haproxy-"+tt.name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("reading %s (run with -update to create it): %v", golden, err)
			}
			if got != string(want) {
				t.Errorf("renderHAProxy() differs from %s (run with -update to accept):\n%s", golden, got)
			}
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
