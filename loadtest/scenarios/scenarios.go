// Package scenarios holds the load-test scenario files (*.json), read by
// the k6 script (loadtest/k6/repool.js, with open()) and, embedded here, by
// the Go runner (loadtest/cmd/run). See package loadtest/scenario for the
// format.
package scenarios

import "embed"

// FS holds every scenario file, by name: "baseline.json", ...
//
//go:embed *.json
var FS embed.FS
