package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/repool/repool/internal/server"
)

// TestAdminTokenNoStore: admin-token finds the store as `server run` does
// and refuses, creating nothing, when no server has made it.
func TestAdminTokenNoStore(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir) // the default store is ./data/repool.db
	missing := filepath.Join(dir, "elsewhere", "repool.db")
	config := writeFile(t, dir, "server.yaml", "store: sqlite:"+missing+"\n")
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o750); err != nil {
		t.Fatal(err)
	}
	inEmpty := filepath.Join(dir, "empty", "repool.db")
	wantMissing := "no store at " + missing + "; start the server first"
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string
	}{
		{"default store", nil, nil, "no store at ./data/repool.db; start the server first"},
		{"--store", []string{"--store", "sqlite:" + missing}, nil, wantMissing},
		{"sqlite:// spelling", []string{"--store", "sqlite://" + missing}, nil, wantMissing},
		{"REPOOL_STORE", nil, map[string]string{"REPOOL_STORE": "sqlite:" + missing}, wantMissing},
		{"--config", []string{"--config", config}, nil, wantMissing},
		{"REPOOL_CONFIG", nil, map[string]string{"REPOOL_CONFIG": config}, wantMissing},
		{"directory without a store", []string{"--store", "sqlite:" + inEmpty}, nil, "no store at " + inEmpty + ";"},
		{"in-memory store", []string{"--store", "sqlite::memory:"}, nil, "private to one process"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"admin-token", "--role", "operator"}, tt.args...)
			var stdout strings.Builder
			err := run(t.Context(), args, func(k string) string { return tt.env[k] }, &stdout, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("run(%v) = got error %v, want %q", args, err, tt.wantErr)
			}
			if stdout.Len() > 0 {
				t.Errorf("run(%v) printed %q, want nothing", args, stdout.String())
			}
			for _, d := range []string{filepath.Dir(missing), filepath.Join(dir, "data"), inEmpty} {
				if _, err := os.Stat(d); !os.IsNotExist(err) {
					t.Errorf("run(%v) left %s behind (stat: %v), want nothing created", args, d, err)
				}
			}
		})
	}
}

// TestAdminTokenServerAccepts: a token from admin-token, with the store
// named in the config file, opens the control plane of the server running
// on that store.
func TestAdminTokenServerAccepts(t *testing.T) {
	dir := t.TempDir()
	storeURL := "sqlite:" + filepath.Join(dir, "repool.db")
	ctx, cancel := context.WithCancel(t.Context())
	s, err := server.New(ctx, server.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Store: storeURL}, server.Options{})
	if err != nil {
		cancel()
		t.Fatalf("server.New(ctx, cfg, opts) = got error %v, want nil", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run(ctx) = got error %v, want nil", err)
		}
	}()

	config := writeFile(t, dir, "server.yaml", "store: "+storeURL+"\n")
	args := []string{"admin-token", "--role", "operator"}
	env := map[string]string{"REPOOL_CONFIG": config}
	var stdout strings.Builder
	if err := run(t.Context(), args, func(k string) string { return env[k] }, &stdout, io.Discard); err != nil {
		t.Fatalf("run(%v) = got error %v, want nil", args, err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+s.HTTPAddr()+"/api/v1/tenants", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(stdout.String()))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /api/v1/tenants = got error %v, want nil", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/v1/tenants with the admin token = got %s, want 200 OK", resp.Status)
	}
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
