package server

import (
	"net/http"
	"testing"
	"time"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/buildinfo"
	"github.com/repool/repool/internal/control"
	"github.com/repool/repool/internal/limits"
	"github.com/repool/repool/internal/status"
)

// TestStatus: GET /status.json answers the server's status to an operator or a
// metrics token, 401 without a valid token and 403 to a tenant's, as the
// control plane's routes do; a single server on SQLite is active, in the
// default group, with its epoch, its build, its configuration hash, a
// writable store, the tenants it serves and its last checkpoint.
func TestStatus(t *testing.T) {
	r := start(t, Config{Store: sqliteStore(t)})
	if _, err := r.pool.Register(withKey(r.key), &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "proxy-1"}}}); err != nil {
		t.Fatalf("Register() = got error %v, want nil", err)
	}
	mint := func(role, tenant string) string {
		t.Helper()
		tok, _, err := control.MintToken(r.s.signer, role, tenant, time.Hour)
		if err != nil {
			t.Fatalf("MintToken(%s) = got error %v, want nil", role, err)
		}
		return tok
	}
	for _, tt := range []struct {
		name, token string
		want        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"bad token", "nope", http.StatusUnauthorized},
		{"tenant-admin", mint(control.RoleTenantAdmin, "demo"), http.StatusForbidden},
		{"tenant-viewer", mint(control.RoleTenantViewer, "demo"), http.StatusForbidden},
		{"metrics", mint(control.RoleMetrics, ""), http.StatusOK},
		{"operator", r.op, http.StatusOK},
	} {
		if got := r.api(t, "GET", "/status.json", tt.token, "", nil); got != tt.want {
			t.Errorf("GET /status.json with %s token = got %d, want %d", tt.name, got, tt.want)
		}
	}

	if err := r.s.Checkpoint(t.Context()); err != nil {
		t.Fatalf("Checkpoint() = got error %v, want nil", err)
	}
	var st status.Server
	if code := r.api(t, "GET", "/status.json", mint(control.RoleMetrics, ""), "", &st); code != http.StatusOK {
		t.Fatalf("GET /status.json = got %d, want 200", code)
	}
	in := buildinfo.Read()
	switch {
	case st.Role != status.RoleActive || !st.Serving || st.Reason != "active":
		t.Errorf("role = got %q serving %v (%q), want active, serving", st.Role, st.Serving, st.Reason)
	case st.HA || st.Election != nil || st.Group != "default":
		t.Errorf("HA %v election %+v group %q, want a single server of group default", st.HA, st.Election, st.Group)
	case st.Epoch == 0 || st.LeaderSince == nil || st.LeaderSince.After(st.Time):
		t.Errorf("epoch %d since %v, want the term's epoch and start", st.Epoch, st.LeaderSince)
	case st.Build.Version != in.Version || st.Build.GoVersion != in.GoVersion:
		t.Errorf("build = got %+v, want %+v", st.Build, in)
	case len(st.ConfigHash) != 12 || st.ConfigHash != configHash(r.s.cfg, r.s.storeURL):
		t.Errorf("config hash = got %q, want 12 hex digits of the configuration", st.ConfigHash)
	case st.Store.Kind != "sqlite" || !st.Store.Writable || st.Store.Error != "":
		t.Errorf("store = got %+v, want a writable sqlite store", st.Store)
	case st.Tenants != 1:
		t.Errorf("tenants = got %d, want 1 (demo)", st.Tenants)
	case st.LastCheckpoint == nil || st.CheckpointAgeSeconds == nil || *st.CheckpointAgeSeconds < 0:
		t.Errorf("last checkpoint = got %v (age %v), want the round just run", st.LastCheckpoint, st.CheckpointAgeSeconds)
	}
}

// TestConfigHash: the hash is the same for two servers that differ only in
// name and listen addresses, and differs when a setting differs; the
// store's password does not reach it.
func TestConfigHash(t *testing.T) {
	a := Config{Store: "postgres://repool:secret@db:5432/repool", HAName: "a", GRPCAddr: "10.0.0.21:9090", HTTPAddr: "10.0.0.21:8081"}.WithDefaults()
	b := a
	b.HAName, b.GRPCAddr, b.HTTPAddr = "b", "10.0.0.22:9090", "10.0.0.22:8081"
	c := a
	c.Limits.Set(limits.Burst, c.Limits.Value(limits.Burst)+1)
	hash := func(c Config) string {
		u, err := c.StoreURL()
		if err != nil {
			t.Fatal(err)
		}
		return configHash(c, u)
	}
	if hash(a) != hash(b) {
		t.Errorf("hash of two servers with the same settings = got %s and %s, want them equal", hash(a), hash(b))
	}
	if hash(a) == hash(c) {
		t.Errorf("hash with another burst = got %s for both, want them different", hash(a))
	}
	d := a
	d.Store = "postgres://repool:other@db:5432/repool"
	if hash(a) != hash(d) {
		t.Errorf("hash with another password = got %s and %s, want equal (the URL is redacted)", hash(a), hash(d))
	}
}
