package server

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"
)

func TestLoad(t *testing.T) {
	file := filepath.Join(t.TempDir(), "server.yaml")
	if err := os.WriteFile(file, []byte("burst: 70\ncheckpoint_interval: 3s\nrate_per_second: 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(Config) bool
		wantErr bool
	}{
		{"defaults", nil, nil, func(c Config) bool { return c.GRPCAddr == "127.0.0.1:9090" && c.Burst == 50 && !c.HA }, false},
		{"bare --ha switch", []string{"--ha", "--store", "postgres://x@127.0.0.1/db"}, nil, func(c Config) bool { return c.HA && c.Store == "postgres://x@127.0.0.1/db" }, false},
		{"--ha without postgres", []string{"--ha"}, nil, nil, true},
		{"file, env and flags in order", []string{"--config", file, "--burst", "90"}, map[string]string{"REPOOL_RATE_PER_SECOND": "7"},
			func(c Config) bool {
				return c.Burst == 90 && c.RatePerSecond == 7 && c.CheckpointInterval == 3*time.Second
			}, false},
		{"bad duration", []string{"--token-ttl", "soon"}, nil, nil, true},
		{"gc defaults", nil, nil, func(c Config) bool { return c.GCPercent == 400 && c.MemoryLimit == 0 }, false},
		{"memory limit with a unit", []string{"--memory-limit", "512MiB", "--gc-percent", "200"}, nil,
			func(c Config) bool { return c.MemoryLimit == 512<<20 && c.GCPercent == 200 }, false},
		{"memory limit from env in bytes", nil, map[string]string{"REPOOL_MEMORY_LIMIT": "1073741824"}, func(c Config) bool { return c.MemoryLimit == 1<<30 }, false},
		{"gc off with a limit", []string{"--gc-percent", "-1", "--memory-limit", "2GiB"}, nil, func(c Config) bool { return c.GCPercent == -1 }, false},
		{"gc off without a limit", []string{"--gc-percent", "-1"}, nil, nil, true},
		{"gc percent too low", []string{"--gc-percent", "5"}, nil, nil, true},
		{"memory limit too small", []string{"--memory-limit", "1MiB"}, nil, nil, true},
		{"memory limit unknown unit", []string{"--memory-limit", "2GB"}, nil, nil, true},
		{"memory limit negative", []string{"--memory-limit", "-5"}, nil, nil, true},
		{"memory limit overflow", []string{"--memory-limit", "9999999999TiB"}, nil, nil, true},
		{"stray argument", []string{"extra"}, nil, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("server", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			cfg, err := Load(fs, tt.args, func(k string) string { return tt.env[k] })
			if (err != nil) != tt.wantErr {
				t.Fatalf("Load(%v) = %+v, %v; want error %v", tt.args, cfg, err, tt.wantErr)
			}
			if err == nil && !tt.check(cfg) {
				t.Fatalf("Load(%v) = %+v", tt.args, cfg)
			}
		})
	}
}

// TestTuneRuntime: the configured GC settings reach the runtime, GOGC and
// GOMEMLIMIT in the environment win, and restore puts the old ones back.
func TestTuneRuntime(t *testing.T) {
	before := debug.SetGCPercent(100)
	beforeLimit := debug.SetMemoryLimit(-1)
	defer debug.SetGCPercent(before)
	defer debug.SetMemoryLimit(beforeLimit)

	restore := TuneRuntime(Config{GCPercent: 300, MemoryLimit: 256 << 20}, func(string) string { return "" })
	if got := debug.SetGCPercent(300); got != 300 {
		t.Errorf("GC percent = %d, want 300", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 256<<20 {
		t.Errorf("memory limit = %d, want %d", got, 256<<20)
	}
	restore()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GC percent after restore = %d, want 100", got)
	}

	env := map[string]string{"GOGC": "150", "GOMEMLIMIT": "1GiB"}
	restore = TuneRuntime(Config{GCPercent: 300, MemoryLimit: 256 << 20}, func(k string) string { return env[k] })
	defer restore()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GC percent with GOGC set = %d, want it untouched (100)", got)
	}
	if got := debug.SetMemoryLimit(-1); got == 256<<20 {
		t.Errorf("memory limit with GOMEMLIMIT set = %d, want it untouched", got)
	}
}
