package servercmd

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/repool/repool/internal/server"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/open"
	"github.com/repool/repool/internal/testenv"
)

// assertNothingCreated fails t if any of paths exists.
func assertNothingCreated(t *testing.T, args []string, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Run(%q) left %s behind (stat: %v), want nothing created", args, p, err)
		}
	}
}

// TestAdminTokenChecksItsFlagsFirst: a bad --role, --tenant or --ttl is
// reported, in the flags' terms, before anything about the store (here,
// there is none).
func TestAdminTokenChecksItsFlagsFirst(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir) // the default store ./data/repool.db does not exist
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no role", nil, "--role is required: operator, tenant-admin, tenant-viewer or metrics"},
		{"unknown role", []string{"--role", "admin"}, `--role "admin": want operator, tenant-admin, tenant-viewer or metrics`},
		{"tenant role without tenant", []string{"--role", "tenant-admin"}, "--role tenant-admin needs --tenant ID"},
		{"viewer without tenant", []string{"--role", "tenant-viewer"}, "--role tenant-viewer needs --tenant ID"},
		{"operator with tenant", []string{"--role", "operator", "--tenant", "demo"}, `--role operator is not for one tenant and takes no --tenant (got --tenant "demo")`},
		{"metrics with tenant", []string{"--role", "metrics", "--tenant", "demo"}, `--role metrics is not for one tenant and takes no --tenant (got --tenant "demo")`},
		{"malformed tenant", []string{"--role", "tenant-viewer", "--tenant", "Demo!"}, `--tenant "Demo!": want 1-`},
		{"zero ttl", []string{"--role", "operator", "--ttl", "0s"}, "--ttl 0s: want a positive duration"},
		{"negative ttl", []string{"--role", "operator", "--ttl", "-1h"}, "--ttl -1h0m0s: want a positive duration"},
		{"ttl that does not parse", []string{"--role", "operator", "--ttl", "soon"}, `invalid value "soon" for flag -ttl`},
		{"stray argument", []string{"--role", "operator", "demo"}, "unexpected arguments: [demo]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"admin-token"}, tt.args...)
			stdout, _, err := call(t, args, nil)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Run(%q) = got error %v, want %q", args, err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "store") {
				t.Errorf("Run(%q) = got error %q, want nothing about the store before the flags are right", args, err)
			}
			if stdout != "" {
				t.Errorf("Run(%q) printed %q, want nothing", args, stdout)
			}
			assertNothingCreated(t, args, filepath.Join(dir, "data"))
		})
	}
}

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
	noSchema := writeFile(t, dir, "blank.db", "")
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
		{"file without a schema", []string{"--store", "sqlite:" + noSchema}, nil, "no repool store in it"},
		{"in-memory store", []string{"--store", "sqlite::memory:"}, nil, "private to one process"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"admin-token", "--role", "operator"}, tt.args...)
			stdout, _, err := call(t, args, tt.env)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Run(%q) = got error %v, want %q", args, err, tt.wantErr)
			}
			if stdout != "" {
				t.Errorf("Run(%q) printed %q, want nothing", args, stdout)
			}
			assertNothingCreated(t, args, filepath.Dir(missing), filepath.Join(dir, "data"), inEmpty)
			if fi, err := os.Stat(noSchema); err != nil || fi.Size() != 0 {
				t.Errorf("Run(%q): %s = got %v, %v, want it still empty", args, noSchema, fi, err)
			}
		})
	}
}

// TestAdminTokenCreatesNoSigningKey: on a store that holds no signing key
// yet (migrated, but no server has started on it), admin-token refuses
// and the store still holds none: a key made here would not be the one
// the server makes.
func TestAdminTokenCreatesNoSigningKey(t *testing.T) {
	tests := []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "repool.db") }},
		{"postgres", func(t *testing.T) string { return testenv.Postgres(t) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := tt.url(t)
			st, err := open.Store(t.Context(), url, store.Options{}) // migrates, makes no key
			if err != nil {
				t.Fatal(err)
			}
			st.Close()
			args := []string{"admin-token", "--role", "operator", "--store", url}
			stdout, _, err := call(t, args, nil)
			if err == nil || !strings.Contains(err.Error(), "the store has no signing key") {
				t.Fatalf("Run(%q) = got error %v, want the missing signing key refused", args, err)
			}
			if stdout != "" {
				t.Errorf("Run(%q) printed %q, want nothing", args, stdout)
			}
			ro, err := open.Store(t.Context(), url, store.Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer ro.Close()
			if _, err := ro.SigningKey(t.Context()); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("SigningKey(ctx) after Run(%q) = got error %v, want store.ErrNotFound: admin-token must not create the key", args, err)
			}
		})
	}
}

// runServer runs a server on storeURL (loopback, port 0) until the test
// ends.
func runServer(t *testing.T, storeURL string) *server.Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := server.New(ctx, server.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Store: storeURL}, server.Options{})
	if err != nil {
		cancel()
		t.Fatalf("server.New(ctx, cfg, opts) = got error %v, want nil", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run(ctx) = got error %v, want nil", err)
		}
	})
	return s
}

// TestAdminTokenTenants: a tenant token is minted only for a tenant that
// exists; an unknown or deleted one is refused with the tenants the store
// has and how to list them.
func TestAdminTokenTenants(t *testing.T) {
	storeURL := "sqlite:" + filepath.Join(t.TempDir(), "repool.db")
	runServer(t, storeURL) // creates tenant demo and the signing key
	st, err := open.Store(t.Context(), storeURL, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"acme", "gone"} {
		if _, err := st.CreateTenant(t.Context(), store.Tenant{ID: id, Name: id}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.DeleteTenant(t.Context(), "gone"); err != nil {
		t.Fatal(err)
	}
	st.Close()
	list := `GET /api/v1/tenants with a token from "server admin-token --role operator"`
	tests := []struct {
		name    string
		args    []string
		wantErr []string // each in the error; none: success
	}{
		{"unknown tenant", []string{"--role", "tenant-admin", "--tenant", "nope"}, []string{`--tenant "nope": no such tenant; the store's tenants: acme, demo`, list}},
		{"deleted tenant", []string{"--role", "tenant-viewer", "--tenant", "gone"}, []string{`--tenant "gone": the tenant was deleted; the store's tenants: acme, demo`, list}},
		{"existing tenant", []string{"--role", "tenant-admin", "--tenant", "acme"}, nil},
		{"operator", []string{"--role", "operator"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"admin-token", "--store", storeURL}, tt.args...)
			stdout, stderr, err := call(t, args, nil)
			if tt.wantErr == nil {
				if err != nil || !strings.HasPrefix(stdout, "eyJ") || !strings.Contains(stderr, "expires") {
					t.Fatalf("Run(%q) = got %v, stdout %q, stderr %q, want a token and its expiry", args, err, stdout, stderr)
				}
				return
			}
			for _, w := range tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Run(%q) = got error %v, want it to contain %q", args, err, w)
				}
			}
			if stdout != "" {
				t.Errorf("Run(%q) printed %q, want nothing", args, stdout)
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
	s := runServer(t, storeURL)
	config := writeFile(t, dir, "server.yaml", "store: "+storeURL+"\n")
	args := []string{"admin-token", "--role", "operator"}
	stdout, _, err := call(t, args, map[string]string{"REPOOL_CONFIG": config})
	if err != nil {
		t.Fatalf("Run(%q) = got error %v, want nil", args, err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+s.HTTPAddr()+"/api/v1/tenants", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(stdout))
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
