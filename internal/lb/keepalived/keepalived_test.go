package keepalived

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/repool/repool/internal/lb/golden"
	"github.com/repool/repool/internal/lb/inventory"
)

// Paths relative to this package.
const (
	examplePath = "../../../haproxy/inventory.yaml"
	notifyPath  = "../../../keepalived/notify.sh"
	// checkedIn holds the configurations checked in for operators,
	// keepalived-<host>.conf: they are the golden files.
	checkedIn = "../../../keepalived"
)

func loadExample(tb testing.TB) *inventory.Inventory {
	tb.Helper()
	inv, err := inventory.Load(examplePath)
	if err != nil {
		tb.Fatalf("inventory.Load(%s) = got error %v, want nil", examplePath, err)
	}
	return inv
}

// TestRenderGolden renders keepalived.conf for each LB host of the example
// inventory, compares it with the checked-in keepalived/keepalived-<host>.conf
// (-update rewrites it) and has the real keepalived check it.
func TestRenderGolden(t *testing.T) {
	for _, host := range []string{"lb1", "lb2"} {
		t.Run(host, func(t *testing.T) {
			inv := loadExample(t)
			got, err := Render(inv, host)
			if err != nil {
				t.Fatalf("Render(example, %s) = got error %v, want nil", host, err)
			}
			golden.Check(t, filepath.Join(checkedIn, "keepalived-"+host+".conf"), got, fmt.Sprintf("Render(example, %s)", host))
			self, _ := inv.Host(host)
			checkConfig(t, got, self.Interface)
		})
	}
}

// checkConfig fails tb unless "keepalived -t" accepts conf silently.
// keepalived checks that the track script's program exists: where
// repool-server is not installed, the check runs /usr/bin/true in its place.
func checkConfig(tb testing.TB, conf []byte, iface string) {
	tb.Helper()
	if _, err := os.Stat(inventory.DefaultCheckProgram); err != nil {
		conf = bytes.ReplaceAll(conf, []byte(inventory.DefaultCheckProgram+" "), []byte("/usr/bin/true "))
	}
	out, err := configTest(tb, conf, iface)
	if err != nil || len(bytes.TrimSpace(out)) != 0 {
		tb.Fatalf("keepalived -t (in a private netns with link %s) = got %v\n%s\nwant exit 0 and no complaint\n%s", iface, err, out, conf)
	}
}

// configTest runs "keepalived -t -f" on conf. keepalived checks that the
// VRRP interface exists (and refuses loopback), so the check runs in a
// private network namespace (unshare --net: needs root, as in CI) holding
// one link of that name, with no address: a dummy link where the kernel has
// the module, else one end of a veth pair. "keepalived -t" only reads: it
// writes no pid file and opens only a netlink socket, which in the private
// namespace sees nothing of the host.
func configTest(tb testing.TB, conf []byte, iface string) ([]byte, error) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "keepalived.conf")
	if err := os.WriteFile(path, conf, 0o600); err != nil {
		tb.Fatal(err)
	}
	script := `ip link add "$1" type dummy 2>/dev/null || ip link add "$1" type veth peer name ktpeer0 || exit 99
exec keepalived -t -f "$2"`
	return exec.Command("unshare", "--net", "/bin/sh", "-c", script, "keepalived-check", iface, path).CombinedOutput()
}

// TestRenderBadConfigFailsCheck proves configTest catches what keepalived
// rejects: a fractional advert_int with VRRPv2 authentication.
func TestRenderBadConfigFailsCheck(t *testing.T) {
	inv := loadExample(t)
	inv.Keepalived.VRRPVersion, inv.Keepalived.AdvertInterval, inv.VIP.AuthPass = 2, 1, "rp00lHA1"
	got, err := Render(inv, "lb1")
	if err != nil {
		t.Fatalf("Render(example with VRRPv2, lb1) = got error %v, want nil", err)
	}
	checkConfig(t, got, "eth0")
	bad := bytes.Replace(got, []byte("advert_int 1\n"), []byte("advert_int 0.5\n"), 1)
	out, err := configTest(t, bad, "eth0")
	if err == nil || !strings.Contains(string(out), "must be an integer") {
		t.Errorf("keepalived -t on advert_int 0.5 = got %v\n%s\nwant a failure saying it must be an integer", err, out)
	}
}

// TestRenderDirectives pins what docs/ha.md and the VIP-move target
// depend on.
func TestRenderDirectives(t *testing.T) {
	inv := loadExample(t)
	got, err := Render(inv, "lb2")
	if err != nil {
		t.Fatalf("Render(example, lb2) = got error %v, want nil", err)
	}
	for _, want := range []string{
		"    enable_script_security\n    vrrp_version 3\n}\n",
		`script "/usr/local/bin/repool-server keepalived check --url http://10.0.0.12:8404/lb-health --for 800ms --every 100ms --timeout 500ms"`,
		"    interval 1\n    timeout 2\n    fall 1\n    rise 2\n",
		"    state BACKUP\n    interface eth0\n    virtual_router_id 51\n    priority 200\n",
		"    nopreempt\n    advert_int 0.4\n",
		"    unicast_src_ip 10.0.0.12\n    # VRRPv3 has no authentication: adverts only from the peers below.\n    check_unicast_src\n    unicast_peer {\n        10.0.0.11\n    }\n",
		"        10.0.0.100/24 dev eth0\n",
		"    track_script {\n        chk_haproxy\n    }\n",
		`notify "/etc/keepalived/notify.sh /var/log/keepalived-repool-lb2.log /var/lib/prometheus/node-exporter/keepalived-repool-lb2.prom"`,
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("Render(example, lb2) = got\n%s\nwant it to contain %q", got, want)
		}
	}
	if strings.Contains(string(got), "auth_type") {
		t.Errorf("Render(example, lb2) = got\n%s\nwant no authentication block (VRRPv3 has none)", got)
	}
	// Never a process-name check (all namespaces share one process table).
	for _, bad := range []string{"killall", "pidof", "pgrep", "chk_process", "track_process"} {
		if strings.Contains(string(got), bad) {
			t.Errorf("Render(example, lb2) = got a process check %q, want a network check only", bad)
		}
	}
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		name   string
		change func(*inventory.Inventory)
		host   string
		field  string
	}{
		{"unknown host", func(*inventory.Inventory) {}, "lb3", `"lb3"`},
		{"invalid inventory", func(i *inventory.Inventory) { i.VIP.AuthPass = "secret" }, "lb1", "vip.auth_pass"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := loadExample(t)
			tt.change(inv)
			_, err := Render(inv, tt.host)
			if !errors.Is(err, inventory.ErrInvalid) || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("Render(%s) = got error %v, want ErrInvalid naming %s", tt.host, err, tt.field)
			}
		})
	}
}

// TestNotifyScript runs keepalived/notify.sh the way keepalived does: it
// appends a line per transition to the log and rewrites the metrics file
// with the state it entered, in the text format Prometheus parses.
func TestNotifyScript(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "sub", "notify.log")
	metrics := filepath.Join(dir, "textfile", "keepalived-repool-lb1.prom")
	wantMetrics := func(state string) {
		t.Helper()
		raw, err := os.ReadFile(metrics)
		if err != nil {
			t.Fatalf("read %s = got error %v, want the metrics", metrics, err)
		}
		p := expfmt.NewTextParser(model.LegacyValidation)
		mfs, err := p.TextToMetricFamilies(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("metrics file does not parse: %v\n%s", err, raw)
		}
		got := map[string]float64{}
		for name, mf := range mfs {
			for _, m := range mf.GetMetric() {
				key := name
				for _, l := range m.GetLabel() {
					key += " " + l.GetName() + "=" + l.GetValue()
				}
				got[key] = m.GetGauge().GetValue()
			}
		}
		master := 0.0
		if state == "MASTER" {
			master = 1
		}
		if got["repool_keepalived_master vrrp_instance=repool"] != master {
			t.Errorf("in state %s: repool_keepalived_master = %v, want %v\n%s", state, got["repool_keepalived_master vrrp_instance=repool"], master, raw)
		}
		for _, s := range []string{"MASTER", "BACKUP", "FAULT", "STOP"} {
			want := 0.0
			if s == state {
				want = 1
			}
			if v, ok := got["repool_keepalived_state vrrp_instance=repool state="+s]; !ok || v != want {
				t.Errorf("in state %s: repool_keepalived_state{state=%q} = %v (present %v), want %v", state, s, v, ok, want)
			}
		}
		if got["repool_keepalived_transition_timestamp_seconds vrrp_instance=repool"] <= 0 {
			t.Errorf("in state %s: no transition timestamp\n%s", state, raw)
		}
	}
	for _, args := range [][]string{
		{"INSTANCE", "repool", "BACKUP", "200"},
		{"INSTANCE", "repool", "MASTER", "200"},
	} {
		out, err := exec.Command(notifyPath, append([]string{log, metrics}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("notify.sh %s %s %v = got %v\n%s, want success", log, metrics, args, err, out)
		}
		wantMetrics(args[2])
	}
	raw, err := os.ReadFile(log)
	if err != nil {
		t.Fatalf("read %s = got error %v, want the log", log, err)
	}
	line := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INSTANCE repool (BACKUP|MASTER) priority=200$`)
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	if len(lines) != 2 || !line.MatchString(lines[0]) || !line.MatchString(lines[1]) || !strings.Contains(lines[1], "MASTER") {
		t.Errorf("notify log = got %q, want a BACKUP then a MASTER line matching %s", raw, line)
	}
	// A GROUP's transition is logged; the metrics stay the instance's.
	if out, err := exec.Command(notifyPath, log, metrics, "GROUP", "g", "FAULT").CombinedOutput(); err != nil {
		t.Fatalf("notify.sh GROUP = got %v\n%s, want success", err, out)
	}
	wantMetrics("MASTER")
	if entries, _ := os.ReadDir(filepath.Dir(metrics)); len(entries) != 1 {
		t.Errorf("textfile directory holds %d files, want only the metrics file (no temporary left)", len(entries))
	}
	for _, args := range [][]string{{log}, {log, metrics, "INSTANCE", "repool"}} {
		if err := exec.Command(notifyPath, args...).Run(); err == nil {
			t.Errorf("notify.sh %v = got success, want a usage error", args)
		}
	}
}
