// Package buildinfo says which build of repool is running: the module
// version, the commit it was built from (and whether the tree had changes
// not committed), and the Go version, as the Go toolchain records them in
// every binary (runtime/debug.ReadBuildInfo). Both commands print it for
// --version, and both export it as the repool_build_info metric, so that a
// rolling upgrade can be checked host by host and from Prometheus.
package buildinfo

import (
	"fmt"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Info is one build's identity.
type Info struct {
	// Version is the main module's version: a release tag, or "devel" for
	// a build from a checkout.
	Version string
	// Revision is the VCS commit, "unknown" when the build recorded none
	// (go run, or a build outside a checkout); Modified is true when the
	// tree had changes not committed.
	Revision string
	Modified bool
	// GoVersion is the toolchain that built it.
	GoVersion string
}

// Read returns this binary's Info.
func Read() Info {
	in := Info{Version: "devel", Revision: "unknown", GoVersion: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return in
	}
	in.GoVersion = bi.GoVersion
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		in.Version = v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// String is the --version line: "PROGRAM VERSION (commit REV[, modified]; GO)".
func (in Info) String(program string) string {
	rev := in.Revision
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if in.Modified {
		rev += ", modified"
	}
	return fmt.Sprintf("repool %s %s (commit %s; %s)", program, in.Version, rev, in.GoVersion)
}

// Collector is the repool_build_info gauge: always 1, the build in its
// labels (program, version, revision, modified, goversion), as Prometheus'
// own exporters do for theirs.
func (in Info) Collector(program string) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "repool_build_info",
		Help: "The running build: always 1, with the program, the module version, the commit (revision; modified: uncommitted changes) and the Go version as labels.",
		ConstLabels: prometheus.Labels{"program": program, "version": in.Version, "revision": in.Revision,
			"modified": fmt.Sprint(in.Modified), "goversion": in.GoVersion},
	}, func() float64 { return 1 })
}
