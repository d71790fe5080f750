// Package deploy holds what installs repool on hosts: systemd units
// (deploy/systemd), example configurations (deploy/config) and, in this
// test, the checks that they stay installable: scripts/install stages
// them, "systemd-analyze verify" accepts the units with the binaries it
// built, the units keep their sandboxing, and the examples load.
package deploy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/repool/repool/internal/servercmd"
	"github.com/repool/repool/internal/sidecar/config"
	"github.com/repool/repool/internal/tlsconf/tlstest"
)

// directives every unit must hold, as Key=Value.
var directives = []string{
	"Restart=on-failure", "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes",
	"StateDirectoryMode=0700", "CapabilityBoundingSet=",
}

// unitKeys reads a unit's Key=Value lines.
func unitKeys(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keys := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			keys[line] = true
		}
	}
	return keys
}

func TestUnits(t *testing.T) {
	for _, tt := range []struct {
		unit, user, exec string
		reload           bool // SIGHUP re-reads something (the sync loop has nothing to re-read)
	}{
		{"repool-server.service", "repool", "/usr/local/bin/repool-server run --config /etc/repool/server.yaml", true},
		{"repool-sidecar.service", "repool-sidecar", "/usr/local/bin/repool-sidecar --config /etc/repool/sidecar.yaml", true},
		{"repool-sync-placements.service", "", "/usr/local/bin/repool-server haproxy sync-placements --inventory /etc/repool/inventory.yaml --host ${REPOOL_LB_HOST} --store ${REPOOL_STORE}", false},
	} {
		keys := unitKeys(t, filepath.Join("systemd", tt.unit))
		want := append(directives, "ExecStart="+tt.exec)
		if tt.user != "" {
			want = append(want, "User="+tt.user, "Group="+tt.user, "StateDirectory="+tt.user)
		}
		if tt.reload {
			want = append(want, "ExecReload=/bin/kill -HUP $MAINPID")
		}
		for _, d := range want {
			if !keys[d] {
				t.Errorf("%s lacks %s", tt.unit, d)
			}
		}
	}
}

// TestInstallAndVerify stages scripts/install under a temporary DESTDIR
// and has systemd-analyze verify the installed units, pointed at the
// binaries it built. A warning (an unknown key, a missing binary) fails it
// as an error does.
func TestInstallAndVerify(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Fatalf("systemd-analyze not found (%v): scripts/test installs Debian's systemd package", err)
	}
	dest := t.TempDir()
	cmd := exec.Command("../scripts/install")
	cmd.Env = append(os.Environ(), "DESTDIR="+dest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("DESTDIR=%s scripts/install = %v\n%s", dest, err, out)
	}
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{
		{"usr/local/bin/repool-server", 0o755}, {"usr/local/bin/repool-sidecar", 0o755},
		{"etc/systemd/system/repool-server.service", 0o644}, {"etc/systemd/system/repool-sidecar.service", 0o644},
		{"etc/systemd/system/repool-sync-placements.service", 0o644}, {"etc/repool/lb.env", 0o600},
		{"usr/lib/sysusers.d/repool.conf", 0o644},
		{"etc/repool/server.yaml", 0o640}, {"etc/repool/server.env", 0o600}, {"etc/repool/sidecar.yaml", 0o640},
	} {
		fi, err := os.Stat(filepath.Join(dest, f.path))
		if err != nil || fi.Mode().Perm() != f.mode {
			t.Errorf("installed %s = %v, %v; want mode %v", f.path, fi, err, f.mode)
		}
	}
	units := t.TempDir()
	var paths []string
	for _, u := range []string{"repool-server.service", "repool-sidecar.service", "repool-sync-placements.service"} {
		raw, err := os.ReadFile(filepath.Join(dest, "etc/systemd/system", u))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(units, u)
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(raw), "/usr/local/bin/", dest+"/usr/local/bin/")), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	out, err := exec.Command("systemd-analyze", append([]string{"verify"}, paths...)...).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify = %v, output %q; want success and no warning", err, out)
	}
}

// TestExampleConfigs: the example configurations load and validate (the
// sidecar's with its CA file in place).
func TestExampleConfigs(t *testing.T) {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg, err := servercmd.Load(fs, []string{"--config", "config/server.yaml"}, func(string) string { return "" })
	if err != nil || cfg.TLSCert == "" || !cfg.HA {
		t.Errorf("servercmd.Load(config/server.yaml) = %v; want a valid HA configuration with TLS", err)
	}

	raw, err := os.ReadFile("config/sidecar.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tlstest.NewCA(t, "example CA").WriteCA(dir, "ca.crt")
	if err := os.WriteFile(filepath.Join(dir, "sidecar-default.key"), []byte("rpk_example\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	doc := strings.NewReplacer("/etc/repool/tls/", dir+"/", "/etc/repool/", dir+"/").Replace(string(raw))
	path := filepath.Join(dir, "sidecar.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	sc, err := config.Load(path, func(string) string { return "" })
	if err == nil {
		err = sc.WithDefaults().Validate()
	}
	if err != nil || !sc.Providers["default"].TLS.On() {
		t.Errorf("the example sidecar.yaml = %v; want a valid configuration with TLS", err)
	}
}

// TestMakeCerts runs deploy/make-certs (openssl) as docs/ha.md does and
// checks what it made: every certificate verifies against the CA for its
// names, every key matches its certificate, HAProxy's files hold both, and
// a second run renews the certificates with the same CA.
func TestMakeCerts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	run := func() {
		out, err := exec.Command("./make-certs", dir, "repool.internal", "10.0.0.100", "10.0.0.31", "10.0.0.21", "10.0.0.22").CombinedOutput()
		if err != nil {
			t.Fatalf("make-certs = %v\n%s", err, out)
		}
	}
	run()
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.crt holds no certificate")
	}
	verify := func(certFile, keyFile string, names ...string) *x509.Certificate {
		t.Helper()
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, certFile), filepath.Join(dir, keyFile))
		if err != nil {
			t.Fatalf("%s with %s: %v", certFile, keyFile, err)
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if _, err := leaf.Verify(x509.VerifyOptions{DNSName: n, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
				t.Errorf("%s for %s: %v", certFile, n, err)
			}
		}
		return leaf
	}
	first := verify("vip.pem", "vip.pem", "repool.internal", "10.0.0.100")
	verify("server1.crt", "server1.key", "repool.internal", "10.0.0.21")
	verify("server2.crt", "server2.key", "repool.internal", "10.0.0.22")
	verify("haproxy-client.pem", "haproxy-client.pem", "haproxy")
	verify("postgres.crt", "postgres.key", "10.0.0.31")
	if _, err := verify("postgres.crt", "postgres.key").Verify(x509.VerifyOptions{DNSName: "10.0.0.100", Roots: roots}); err == nil {
		t.Error("postgres.crt for one address verifies for the VIP, want only its own")
	}
	verify("sidecar.crt", "sidecar.key", "sidecar")
	verify("prometheus.crt", "prometheus.key", "prometheus")
	if _, err := verify("server1.crt", "server1.key").Verify(x509.VerifyOptions{DNSName: "10.0.0.22", Roots: roots}); err == nil {
		t.Error("server1.crt verifies for server 2's address, want only its own")
	}
	fi, err := os.Stat(filepath.Join(dir, "server1.key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("server1.key = %v, %v; want mode 0600", fi, err)
	}

	// The database tier: one pair for the VIP and every node (a list).
	out, err := exec.Command("./make-certs", dir, "repool.internal", "10.0.0.100", "10.0.0.100,10.0.0.31,10.0.0.32,10.0.0.33", "10.0.0.21").CombinedOutput()
	if err != nil {
		t.Fatalf("make-certs with the database tier's addresses = %v\n%s", err, out)
	}
	verify("postgres.crt", "postgres.key", "10.0.0.100", "10.0.0.31", "10.0.0.32", "10.0.0.33")

	run() // renewal: new certificates, the same CA
	if second := verify("vip.pem", "vip.pem", "repool.internal"); second.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Error("a second run kept the VIP's certificate, want a renewed one")
	}
	if again, _ := os.ReadFile(filepath.Join(dir, "ca.crt")); !bytes.Equal(again, caPEM) {
		t.Error("a second run replaced the CA, want it reused")
	}
}
