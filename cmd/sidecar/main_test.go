package main

import (
	"os"
	"strings"
	"testing"

	"github.com/repool/repool/internal/testenv"
)

func TestMain(m *testing.M) {
	testenv.RunAsCommand("sidecar", main)
	os.Exit(m.Run())
}

// TestExitStatus runs this test binary as the sidecar command: help exits
// 0, a stray argument 1 after the usage.
func TestExitStatus(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantStatus int
		wantStdout string
		wantStderr string
	}{
		{"-h", []string{"-h"}, 0, "-listen", ""},
		{"--help", []string{"--help"}, 0, "-config", ""},
		{"help", []string{"help"}, 0, "-log-level", ""},
		{"stray argument", []string{"serve"}, 1, "", "sidecar: unexpected arguments: [serve]: the sidecar has no commands"},
		{"unknown flag", []string{"--bogus"}, 1, "", "usage: sidecar"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, stdout, stderr := testenv.RunCommand(t, tt.args...)
			if status != tt.wantStatus {
				t.Errorf("sidecar %q = got exit status %d (stderr %q), want %d", tt.args, status, stderr, tt.wantStatus)
			}
			if !strings.Contains(stdout, tt.wantStdout) || !strings.Contains(stderr, tt.wantStderr) {
				t.Errorf("sidecar %q = got stdout %q, stderr %q, want %q and %q in them", tt.args, stdout, stderr, tt.wantStdout, tt.wantStderr)
			}
		})
	}
}
