package tenantmap_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/lb/haproxy"
	"github.com/repool/repool/internal/lb/haproxy/haproxytest"
	"github.com/repool/repool/internal/lb/inventory"
	"github.com/repool/repool/internal/lb/tenantmap"
	"github.com/repool/repool/internal/testenv"
)

// fakeSource is a Source whose placements and error the test sets.
type fakeSource struct {
	mu    sync.Mutex
	pl    map[string]string
	err   error
	calls int
}

func (f *fakeSource) Placements(context.Context) (map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	return maps.Clone(f.pl), nil
}

func (f *fakeSource) set(pl map[string]string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pl, f.err = pl, err
}

func (f *fakeSource) polls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// groupsCluster is the real HAProxy in front of one active fake server per
// group: default1 (group default), a1 (group a) and b1 (group b).
type groupsCluster struct {
	inv *inventory.Inventory
	*haproxytest.Process
}

func startGroups(t *testing.T) *groupsCluster { return startGroupsTB(t) }

func startGroupsTB(t testing.TB) *groupsCluster {
	t.Helper()
	servers := []*haproxytest.Server{
		haproxytest.NewServer(t, "default1", http.StatusOK),
		haproxytest.NewServer(t, "a1", http.StatusOK),
		haproxytest.NewServer(t, "b1", http.StatusOK),
		haproxytest.NewServer(t, "b2", http.StatusNotFound), // b's standby
	}
	servers[1].Group, servers[2].Group, servers[3].Group = "a", "b", "b"
	dir := t.TempDir()
	inv := haproxytest.LoopbackInventory(t, dir, servers...)
	p := haproxytest.Start(t, inv, dir)
	haproxytest.WaitStatus(t, p.Runtime, map[string]string{"default1": "UP", "a1": "UP", "b1": "UP", "b2": "NOLB"})
	return &groupsCluster{inv: inv, Process: p}
}

// mapEntries returns what the running HAProxy's tenant map holds; a key it
// holds more than once has the value "(duplicate)".
func (c *groupsCluster) mapEntries(t *testing.T) map[string]string {
	t.Helper()
	m, err := c.Runtime.Map(c.inv.HAProxy.TenantMap)
	if err != nil {
		t.Fatalf("Runtime.Map(%s) = got error %v, want nil", c.inv.HAProxy.TenantMap, err)
	}
	entries, err := m.Entries()
	if err != nil {
		t.Fatalf("Map.Entries() = got error %v, want nil", err)
	}
	out := map[string]string{}
	for _, e := range entries {
		if _, dup := out[e.Key]; dup {
			out[e.Key] = "(duplicate)"
			continue
		}
		out[e.Key] = e.Value
	}
	return out
}

// checkFile fails t unless the map file holds exactly placements' render.
func (c *groupsCluster) checkFile(t *testing.T, placements map[string]string) {
	t.Helper()
	got, err := os.ReadFile(c.inv.HAProxy.TenantMap)
	if err != nil {
		t.Fatal(err)
	}
	want, err := tenantmap.Render(placements)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("map file = got\n%s\nwant\n%s", got, want)
	}
	parsed, err := tenantmap.Parse(got)
	if err != nil {
		t.Fatalf("Parse(map file) = got error %v, want nil", err)
	}
	for id, g := range placements {
		if g == inventory.DefaultGroup {
			continue
		}
		if parsed[id] != g {
			t.Errorf("map file places %s on %q, want %q", id, parsed[id], g)
		}
	}
}

// routes fails t unless each tenant's gRPC call ("" for none) through the
// VIP is answered by the named server.
func (c *groupsCluster) routes(t *testing.T, want map[string]string) {
	t.Helper()
	for tenant, server := range want {
		if got := haproxytest.Call(t, c.inv, tenant); got != server {
			t.Errorf("gRPC call with x-repool-tenant %q = answered by %s, want %s", tenant, got, server)
		}
	}
}

// TestSyncRoutes runs the real HAProxy with three groups and checks that
// the placements the Syncer applies decide which group's active server
// answers a tenant's gRPC call, that the map file on disk follows, and
// that a failing source or HAProxy changes nothing.
func TestSyncRoutes(t *testing.T) {
	c := startGroups(t)
	src := &fakeSource{pl: map[string]string{"t1": "a", "t2": "default", "t3": "b"}}
	s, err := tenantmap.New(tenantmap.Config{
		Source: src, Socket: c.Socket, File: c.inv.HAProxy.TenantMap, Groups: c.inv.Groups(),
	})
	if err != nil {
		t.Fatalf("New() = got error %v, want nil", err)
	}
	defer s.Close()
	ctx := context.Background()

	// Before any sync the map is empty: every call reaches the default group.
	c.routes(t, map[string]string{"t1": "default1", "": "default1"})

	if err := s.Sync(ctx); err != nil {
		t.Fatalf("Sync() = got error %v, want nil", err)
	}
	if got, want := c.mapEntries(t), map[string]string{"t1": "repool_a", "t3": "repool_b"}; !maps.Equal(got, want) {
		t.Errorf("HAProxy's map after Sync = got %v, want %v", got, want)
	}
	c.checkFile(t, src.pl)
	c.routes(t, map[string]string{
		"t1": "a1", "t3": "b1", // placed on a and b
		"t2": "default1", "": "default1", "nosuch": "default1", // the default group, no header, unknown tenant
	})

	t.Run("move t1 to b, t3 to the default group, add t4", func(t *testing.T) {
		pl := map[string]string{"t1": "b", "t2": "default", "t3": "default", "t4": "a"}
		src.set(pl, nil)
		if err := s.Sync(ctx); err != nil {
			t.Fatalf("Sync() = got error %v, want nil", err)
		}
		if got, want := c.mapEntries(t), map[string]string{"t1": "repool_b", "t4": "repool_a"}; !maps.Equal(got, want) {
			t.Errorf("HAProxy's map = got %v, want %v", got, want)
		}
		c.checkFile(t, pl)
		c.routes(t, map[string]string{"t1": "b1", "t3": "default1", "t4": "a1"})
	})

	t.Run("a failing source changes nothing", func(t *testing.T) {
		before := c.mapEntries(t)
		file, _ := os.ReadFile(c.inv.HAProxy.TenantMap)
		src.set(nil, errors.New("store unreachable"))
		if err := s.Sync(ctx); err == nil {
			t.Fatal("Sync() with a failing source = got nil error, want one")
		}
		if got := c.mapEntries(t); !maps.Equal(got, before) {
			t.Errorf("HAProxy's map after a failed listing = got %v, want %v unchanged", got, before)
		}
		if got, _ := os.ReadFile(c.inv.HAProxy.TenantMap); string(got) != string(file) {
			t.Errorf("map file after a failed listing = got\n%s\nwant it unchanged:\n%s", got, file)
		}
		c.routes(t, map[string]string{"t1": "b1"})
	})

	t.Run("an invalid placement changes nothing", func(t *testing.T) {
		before := c.mapEntries(t)
		src.set(map[string]string{"t1": "a", "T2": "b"}, nil)
		if err := s.Sync(ctx); !errors.Is(err, tenantmap.ErrInvalid) {
			t.Fatalf("Sync() with tenant id T2 = got error %v, want tenantmap.ErrInvalid", err)
		}
		if got := c.mapEntries(t); !maps.Equal(got, before) {
			t.Errorf("HAProxy's map after an invalid listing = got %v, want %v unchanged", got, before)
		}
	})

	t.Run("a change behind the syncer's back is repaired", func(t *testing.T) {
		pl := map[string]string{"t1": "a", "t5": "b"}
		src.set(pl, nil)
		if err := s.Sync(ctx); err != nil {
			t.Fatalf("Sync() = got error %v, want nil", err)
		}
		m, err := c.Runtime.Map(c.inv.HAProxy.TenantMap)
		if err != nil {
			t.Fatal(err)
		}
		// A duplicate, a wrong value and a stray key.
		if err := m.Add([]haproxy.MapEntry{{Key: "t1", Value: "repool_b"}, {Key: "stray", Value: "repool_b"}}); err != nil {
			t.Fatal(err)
		}
		if err := m.Set("t5", "repool_a"); err != nil {
			t.Fatal(err)
		}
		// New placements are applied at once; the same ones are read back
		// only every Config.Verify: this Syncer has not reached it.
		if err := s.Sync(ctx); err != nil {
			t.Fatalf("Sync() = got error %v, want nil", err)
		}
		if got := c.mapEntries(t); maps.Equal(got, map[string]string{"t1": "repool_a", "t5": "repool_b"}) {
			t.Fatalf("HAProxy's map = got %v repaired before Config.Verify, want it left until then", got)
		}
		fc := clock.NewFake(time.Now())
		fresh, err := tenantmap.New(tenantmap.Config{Source: src, Socket: c.Socket, File: c.inv.HAProxy.TenantMap, Clock: fc})
		if err != nil {
			t.Fatal(err)
		}
		defer fresh.Close()
		if err := fresh.Sync(ctx); err != nil {
			t.Fatalf("Sync() = got error %v, want nil", err)
		}
		if got, want := c.mapEntries(t), map[string]string{"t1": "repool_a", "t5": "repool_b"}; !maps.Equal(got, want) {
			t.Errorf("HAProxy's map after the repair = got %v, want %v", got, want)
		}
		c.routes(t, map[string]string{"t1": "a1", "t5": "b1", "stray": "default1"})
	})

	t.Run("HAProxy unreachable", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "repool-tenants.map")
		dead, err := tenantmap.New(tenantmap.Config{Source: src, Socket: filepath.Join(t.TempDir(), "none.sock"), File: file})
		if err != nil {
			t.Fatal(err)
		}
		defer dead.Close()
		if err := dead.Sync(ctx); !errors.Is(err, haproxy.ErrRuntime) {
			t.Fatalf("Sync() with no HAProxy = got error %v, want haproxy.ErrRuntime", err)
		}
		// The file is written first: a HAProxy starting now starts current.
		got, _ := os.ReadFile(file)
		if want, _ := tenantmap.Render(src.pl); string(got) != string(want) {
			t.Errorf("map file with no HAProxy = got\n%s\nwant\n%s", got, want)
		}
	})
}

// TestRun drives the loop on a fake clock: it polls every Interval,
// applies a move at the next tick, and keeps going through failures.
func TestRun(t *testing.T) {
	c := startGroups(t)
	src := &fakeSource{pl: map[string]string{"t1": "a"}}
	fc := clock.NewFake(time.Now())
	var logs lockedBuffer
	s, err := tenantmap.New(tenantmap.Config{Source: src, Socket: c.Socket, File: c.inv.HAProxy.TenantMap, Clock: fc,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run() = got %v, want context.Canceled", err)
		}
	}()

	// tick advances the fake clock by one interval once the loop waits on
	// it, and waits for the poll that follows.
	tick := func() {
		t.Helper()
		n := src.polls()
		wctx, wcancel := context.WithTimeout(ctx, haproxytest.WaitFor)
		defer wcancel()
		if err := fc.Wait(wctx, 1); err != nil {
			t.Fatalf("the loop did not wait on the clock: %v", err)
		}
		fc.Advance(tenantmap.DefaultInterval)
		testenv.Eventually(t, haproxytest.WaitFor, "the next poll", func() bool { return src.polls() > n })
	}

	testenv.Eventually(t, haproxytest.WaitFor, "the first sync", func() bool { return maps.Equal(c.mapEntries(t), map[string]string{"t1": "repool_a"}) })
	c.routes(t, map[string]string{"t1": "a1"})

	src.set(nil, errors.New("store unreachable"))
	tick()
	tick()
	c.routes(t, map[string]string{"t1": "a1"})

	src.set(map[string]string{"t1": "b"}, nil)
	tick()
	testenv.Eventually(t, haproxytest.WaitFor, "the move", func() bool { return maps.Equal(c.mapEntries(t), map[string]string{"t1": "repool_b"}) })
	c.routes(t, map[string]string{"t1": "b1", "": "default1"})
	c.checkFile(t, map[string]string{"t1": "b"})
	// Two failed ticks are one warning, then one recovery (logged once the
	// pass that applied the move has returned).
	testenv.Eventually(t, haproxytest.WaitFor, "the recovery's log", func() bool { return strings.Contains(logs.String(), "recovered") })
	out := logs.String()
	if n := strings.Count(out, "tenant map sync failing"); n != 1 || !strings.Contains(out, "store unreachable") {
		t.Errorf("logs = got\n%s\nwant one failure warning naming the error", out)
	}
	if n := strings.Count(out, "tenant map sync recovered"); n != 1 {
		t.Errorf("logs = got\n%s\nwant one recovery", out)
	}
}

// lockedBuffer is a bytes.Buffer safe for the loop's writes and the
// test's reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// printSource is a fakeSource with a fingerprint the test sets.
type printSource struct {
	*fakeSource
	print string
}

func (p *printSource) PlacementsFingerprint(context.Context) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.print, nil
}

// TestFingerprint: with a Source that has a fingerprint, a tick whose
// fingerprint is the last one lists nothing until a full check is due; a
// new fingerprint lists and applies.
func TestFingerprint(t *testing.T) {
	c := startGroups(t)
	src := &printSource{fakeSource: &fakeSource{pl: map[string]string{"t1": "a"}}, print: "v1"}
	fc := clock.NewFake(time.Now())
	s, err := tenantmap.New(tenantmap.Config{Source: src, Socket: c.Socket, File: c.inv.HAProxy.TenantMap, Clock: fc, Verify: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	sync := func(wantPolls int) {
		t.Helper()
		before := src.polls()
		if err := s.Sync(ctx); err != nil {
			t.Fatalf("Sync() = got error %v, want nil", err)
		}
		if got := src.polls() - before; got != wantPolls {
			t.Fatalf("Sync() listed the placements %d times, want %d", got, wantPolls)
		}
	}
	sync(1)
	c.routes(t, map[string]string{"t1": "a1"})
	sync(0)
	// Changed placements behind an unchanged fingerprint are not seen...
	src.set(map[string]string{"t1": "b"}, nil)
	sync(0)
	c.routes(t, map[string]string{"t1": "a1"})
	// ...until the fingerprint changes,
	src.mu.Lock()
	src.print = "v2"
	src.mu.Unlock()
	sync(1)
	c.routes(t, map[string]string{"t1": "b1"})
	sync(0)
	// or a full check is due.
	src.set(map[string]string{"t1": "a"}, nil)
	fc.Advance(time.Minute)
	sync(1)
	c.routes(t, map[string]string{"t1": "a1"})
}
