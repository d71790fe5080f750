package server

import (
	"flag"
	"io"
	"os"
	"path/filepath"
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
