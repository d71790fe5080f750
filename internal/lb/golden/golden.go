// Package golden compares the configurations the lb packages render with
// the files checked in for them, for tests. A test binary that imports it
// has an -update flag that rewrites those files from the render instead.
package golden

import (
	"bytes"
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files (haproxy/haproxy.cfg, keepalived/*.conf, testdata/*.golden) from a fresh render")

// Check fails tb unless got is the content of the file at path; with
// -update it first writes got there. what names the render, for the
// failure message.
func Check(tb testing.TB, path string, got []byte, what string) {
	tb.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			tb.Fatalf("golden: writing %s = got error %v, want nil", path, err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("golden: reading %s (go test -update writes it) = got error %v, want nil", path, err)
	}
	if !bytes.Equal(got, want) {
		tb.Errorf("%s = got\n%s\nwant %s to match (go test -update rewrites it from the render):\n%s", what, got, path, want)
	}
}
