package buildinfo

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestReadAndString: a test binary has build info: the Go version is the
// toolchain's, and the line names the program, the version and the commit.
func TestReadAndString(t *testing.T) {
	in := Read()
	if !strings.HasPrefix(in.GoVersion, "go1.") {
		t.Fatalf("GoVersion = %q, want the toolchain's", in.GoVersion)
	}
	got := Info{Version: "v1.2.3", Revision: "0123456789abcdef", Modified: true, GoVersion: "go1.26.8"}.String("server")
	if want := "repool server v1.2.3 (commit 0123456789ab, modified; go1.26.8)"; got != want {
		t.Fatalf("String = %q, want %q", got, want)
	}
}

// TestCollector: repool_build_info is 1 with the build in its labels.
func TestCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(Info{Version: "devel", Revision: "abc", GoVersion: "go1.26.8"}.Collector("sidecar"))
	want := `# HELP repool_build_info The running build: always 1, with the program, the module version, the commit (revision; modified: uncommitted changes) and the Go version as labels.
# TYPE repool_build_info gauge
repool_build_info{goversion="go1.26.8",modified="false",program="sidecar",revision="abc",version="devel"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "repool_build_info"); err != nil {
		t.Fatal(err)
	}
}
