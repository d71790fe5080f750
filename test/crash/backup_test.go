package crash

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/testenv"
)

// The online backup of a SQLite store (server backup) and its restore,
// against the real binary.

// backupSite is a server binary and one running server on a store.
type backupSite struct {
	t          *testing.T
	bin        string
	db         string
	grpc, http string
	srv        *server
	operator   string
	conn       *grpc.ClientConn
}

// startSite runs the server on the SQLite database db and waits until it
// serves; flags come after the test's own.
func startSite(t *testing.T, bin, db string, flags ...string) *backupSite {
	t.Helper()
	s := &backupSite{t: t, bin: bin, db: db, grpc: freeAddr(t), http: freeAddr(t)}
	h := &harness{t: t, bin: bin, store: "sqlite:" + db, grpcAddr: s.grpc, httpAddr: s.http, flags: flags}
	s.srv = h.start()
	h.ready(s.srv)
	s.operator = s.adminToken("operator")
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s.conn = conn
	return s
}

func (s *backupSite) pool() repoolv1.PoolServiceClient { return repoolv1.NewPoolServiceClient(s.conn) }

func (s *backupSite) adminToken(role string) string {
	s.t.Helper()
	out, err := exec.Command(s.bin, "admin-token", "--store", "sqlite:"+s.db, "--role", role).Output()
	if err != nil {
		s.t.Fatalf("server admin-token --role %s = got error %v, want a token", role, err)
	}
	return strings.TrimSpace(string(out))
}

// control calls the control plane as the operator and returns the status
// and the body.
func (s *backupSite) control(method, path, body string) (int, string) {
	s.t.Helper()
	req, err := http.NewRequest(method, "http://"+s.http+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.operator)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s = got error %v, want an answer", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

func (s *backupSite) get(path string) string {
	s.t.Helper()
	code, body := s.control("GET", path, "")
	if code != 200 {
		s.t.Fatalf("GET %s = got %d %s, want 200", path, code, body)
	}
	return body
}

// lastFlush is the end of the server's last checkpoint round in which
// every tenant's statistics were written.
func (s *backupSite) lastFlush() float64 {
	s.t.Helper()
	resp, err := http.Get("http://" + s.http + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, "repool_checkpoint_last_full_success_timestamp_seconds "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

// flushedSince waits for a checkpoint round that began after at to end:
// the round after the first one to end after at.
func (s *backupSite) flushedSince(at time.Time) {
	s.t.Helper()
	var first float64
	testenv.Eventually(s.t, 30*time.Second, "a checkpoint round to end", func() bool {
		first = s.lastFlush()
		return first > float64(at.UnixNano())/1e9
	})
	testenv.Eventually(s.t, 30*time.Second, "the next checkpoint round to end", func() bool { return s.lastFlush() > first })
}

// backup runs server backup and returns its output and error.
func (s *backupSite) backup(store, to string) (string, error) {
	return s.run("backup", "--store", store, "--to", to)
}

// run runs the server binary with args and returns its output and error.
func (s *backupSite) run(args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

var foldedRE = regexp.MustCompile(`\((\d+) lease-log records folded in\)`)

// resourceState is what a restore must give back of a resource.
type resourceState struct {
	Capacity           int32
	Labels             map[string]string
	ActiveLeases, Uses int32
	Contexts           []ctxState
	Quarantine         string
}

type ctxState struct {
	Context                         string
	Successes, Failures             float64
	RecentSuccesses, RecentFailures int32
	ConsecutiveFailures             int32
}

// resources reads every resource of the tenant whose key is key.
func resources(t *testing.T, c repoolv1.PoolServiceClient, key string) map[string]resourceState {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
	out := map[string]resourceState{}
	page := ""
	for {
		resp, err := c.ListResources(ctx, &repoolv1.ListResourcesRequest{PageSize: 1000, PageToken: page})
		if err != nil {
			t.Fatalf("ListResources = got error %v, want the resources (the key authenticates)", err)
		}
		for _, r := range resp.GetResources() {
			st := resourceState{Capacity: r.GetCapacity(), Labels: r.GetLabels(), ActiveLeases: r.GetActiveLeases(), Uses: r.GetUses(), Quarantine: r.GetQuarantine()}
			for _, c := range r.GetContexts() {
				st.Contexts = append(st.Contexts, ctxState{Context: c.GetContext(), Successes: c.GetSuccesses(), Failures: c.GetFailures(),
					RecentSuccesses: c.GetRecentSuccesses(), RecentFailures: c.GetRecentFailures(), ConsecutiveFailures: c.GetConsecutiveFailures()})
			}
			out[r.GetId()] = st
		}
		if page = resp.GetNextPageToken(); page == "" {
			return out
		}
	}
}

// sameResource compares two reads of a resource: the decayed counts
// (half-life 1 h) within 1 % for the seconds between the reads, the rest
// exactly.
func sameResource(a, b resourceState) bool {
	if a.Capacity != b.Capacity || a.ActiveLeases != b.ActiveLeases || a.Uses != b.Uses || a.Quarantine != b.Quarantine ||
		len(a.Labels) != len(b.Labels) || len(a.Contexts) != len(b.Contexts) {
		return false
	}
	for k, v := range a.Labels {
		if b.Labels[k] != v {
			return false
		}
	}
	near := func(x, y float64) bool { return math.Abs(x-y) <= 0.01*math.Max(math.Abs(x), math.Abs(y)) }
	for i, c := range a.Contexts {
		d := b.Contexts[i]
		if c.Context != d.Context || c.RecentSuccesses != d.RecentSuccesses || c.RecentFailures != d.RecentFailures ||
			c.ConsecutiveFailures != d.ConsecutiveFailures || !near(c.Successes, d.Successes) || !near(c.Failures, d.Failures) {
			return false
		}
	}
	return true
}

// heldLease is a lease a load client holds.
type heldLease struct {
	id    string
	token uint64
}

// backupLoad is the write load: per tenant a client that registers
// resources, takes leases on them, reports outcomes and releases some
// leases with an outcome. Each step holds gate for reading, so that
// taking it for writing pauses every client between two steps.
type backupLoad struct {
	gate sync.RWMutex
	mu   sync.Mutex
	held map[string][]heldLease // tenant -> leases held
	errs []string
	acks int
	// maxToken is the highest fencing token handed out.
	maxToken uint64
}

func (l *backupLoad) run(ctx context.Context, c repoolv1.PoolServiceClient, tenant, key string, wg *sync.WaitGroup) {
	defer wg.Done()
	cctx := metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
	for i := 0; ctx.Err() == nil; i++ {
		l.gate.RLock()
		err := l.step(cctx, c, tenant, i)
		l.gate.RUnlock()
		if err != nil && ctx.Err() == nil {
			l.mu.Lock()
			l.errs = append(l.errs, fmt.Sprintf("%s step %d: %v", tenant, i, err))
			l.mu.Unlock()
			return
		}
	}
}

func (l *backupLoad) step(ctx context.Context, c repoolv1.PoolServiceClient, tenant string, i int) error {
	id := fmt.Sprintf("%s-r%05d", tenant, i)
	if _, err := c.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{
		{Id: id, Capacity: int32(1 + i%2), Labels: map[string]string{"zone": strconv.Itoa(i % 3)}}}}); err != nil {
		return fmt.Errorf("Register: %w", err)
	}
	resp, err := c.Acquire(ctx, &repoolv1.AcquireRequest{Context: "c" + strconv.Itoa(i%2), TtlSeconds: 3600})
	if err != nil {
		return fmt.Errorf("Acquire: %w", err)
	}
	lease := resp.GetLease()
	l.mu.Lock()
	l.maxToken = max(l.maxToken, lease.GetFencingToken())
	l.mu.Unlock()
	outcome := repoolv1.Outcome_SUCCESS
	if i%4 == 0 {
		outcome = repoolv1.Outcome_FAILURE
	}
	if _, err := c.Report(ctx, &repoolv1.ReportRequest{ResourceId: lease.GetResourceId(), Context: lease.GetContext(), Outcome: outcome,
		LeaseId: lease.GetLeaseId(), FencingToken: lease.GetFencingToken()}); err != nil {
		return fmt.Errorf("Report: %w", err)
	}
	if i%3 == 0 { // every third lease is given back, with an outcome
		if _, err := c.Release(ctx, &repoolv1.ReleaseRequest{LeaseId: lease.GetLeaseId(), FencingToken: lease.GetFencingToken(), Outcome: repoolv1.Outcome_SUCCESS}); err != nil {
			return fmt.Errorf("Release: %w", err)
		}
		l.mu.Lock()
		l.acks += 4
		l.mu.Unlock()
		return nil
	}
	l.mu.Lock()
	l.acks += 3
	l.held[tenant] = append(l.held[tenant], heldLease{lease.GetLeaseId(), lease.GetFencingToken()})
	l.mu.Unlock()
	return nil
}

// TestBackupWhileServing: three tenants with keys and limits of their
// own write resources, leases and outcomes to the real server; server
// backup copies its store while they do, then again with the clients
// paused around the moment (so the copy can be compared exactly with the
// live store); the writes go on after it. A fresh server on a copy of the
// second backup gives back every tenant, key (it authenticates), limit,
// resource and statistic the live server had at the moment, and every
// lease held then with its id and token (it renews), and nothing written
// after. Bad input changes nothing.
func TestBackupWhileServing(t *testing.T) {
	bin := buildServer(t)
	dir := t.TempDir()
	// No compaction while the test runs (the harness's 1 s overridden):
	// the lease log is folded only at the server's start and stop, so
	// both backups find the leases of the load in the log, not in the
	// table. TestBackupMeetsAFold (internal/store/sqlite) covers a fold
	// during a backup.
	live := startSite(t, bin, filepath.Join(dir, "live", "repool.db"), "--checkpoint-interval", "1h")
	tenants := []string{"t1", "t2", "t3"}
	keys := map[string]string{}
	for i, id := range tenants {
		if code, body := live.control("POST", "/api/v1/tenants", `{"id":"`+id+`","name":"Tenant `+id+`"}`); code != 201 {
			t.Fatalf("creating tenant %s = got %d %s, want 201", id, code, body)
		}
		code, body := live.control("POST", "/api/v1/tenants/"+id+"/keys", `{"name":"k"}`)
		var k struct{ Key string }
		if code != 201 || json.Unmarshal([]byte(body), &k) != nil || k.Key == "" {
			t.Fatalf("creating a key of %s = got %d %s, want 201 with a key", id, code, body)
		}
		keys[id] = k.Key
		limits := fmt.Sprintf(`{"rate_per_second":%d,"burst":%d,"max_leases":%d,"max_streams":%d}`, 100000+i, 100000+i, 20000+i, 4+i)
		if code, body := live.control("PUT", "/api/v1/tenants/"+id+"/limits", limits); code != 200 {
			t.Fatalf("PUT limits of %s = got %d %s, want 200", id, code, body)
		}
	}
	// A revoked key comes back revoked.
	code, body := live.control("POST", "/api/v1/tenants/t1/keys", `{"name":"old"}`)
	var old struct{ ID, Key string }
	if code != 201 || json.Unmarshal([]byte(body), &old) != nil {
		t.Fatalf("creating a second key of t1 = got %d %s, want 201", code, body)
	}
	if code, body := live.control("DELETE", "/api/v1/tenants/t1/keys/"+old.ID, ""); code != 204 {
		t.Fatalf("revoking a key = got %d %s, want 204", code, body)
	}

	load := &backupLoad{held: map[string][]heldLease{}}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	for _, id := range tenants {
		wg.Add(1)
		go load.run(ctx, live.pool(), id, keys[id], &wg)
	}
	acks := func() int { load.mu.Lock(); defer load.mu.Unlock(); return load.acks }
	testenv.Eventually(t, 30*time.Second, "the load to write 600 acknowledged calls", func() bool { return acks() >= 600 })

	// A backup under load, the clients not paused: it completes, and a
	// server starts on it.
	start := time.Now()
	out, err := live.backup("sqlite:"+live.db, filepath.Join(dir, "busy.db"))
	if err != nil {
		t.Fatalf("server backup under load = got error %v, want nil: %s", err, out)
	}
	t.Logf("backup under load (%v): %s", time.Since(start).Round(time.Millisecond), out)
	before := acks()
	testenv.Eventually(t, 30*time.Second, "the load to go on after the backup", func() bool { return acks() >= before+300 })

	// The moment: every client paused between two steps, and a checkpoint
	// round that began after the pause ended (its statistics flushed).
	load.gate.Lock()
	live.flushedSince(time.Now())
	wantTenants := live.get("/api/v1/tenants")
	wantLimits, wantKeys, wantRes := map[string]string{}, map[string]string{}, map[string]map[string]resourceState{}
	for _, id := range tenants {
		wantLimits[id] = live.get("/api/v1/tenants/" + id + "/limits")
		wantKeys[id] = live.get("/api/v1/tenants/" + id + "/keys")
		wantRes[id] = resources(t, live.pool(), keys[id])
	}
	load.mu.Lock()
	wantHeld := map[string][]heldLease{}
	for id, ls := range load.held {
		wantHeld[id] = slices.Clone(ls)
	}
	load.mu.Unlock()
	target := filepath.Join(dir, "backup.db")
	start = time.Now()
	out, err = live.backup("sqlite:"+live.db, target)
	if err != nil {
		t.Fatalf("server backup = got error %v, want nil: %s", err, out)
	}
	t.Logf("backup at the moment (%v): %s", time.Since(start).Round(time.Millisecond), out)
	if m := foldedRE.FindStringSubmatch(out); m == nil || m[1] == "0" {
		t.Fatalf("server backup = got %q, want lease-log records folded into the copy (the leases held are in the log)", out)
	}
	load.gate.Unlock()
	before = acks()
	testenv.Eventually(t, 30*time.Second, "the load to go on after the backup", func() bool { return acks() >= before+300 })
	stop()
	wg.Wait()
	if len(load.errs) > 0 {
		t.Fatalf("the load's calls = got errors %v, want none", load.errs)
	}

	// Bad input: a target that exists, a directory that cannot be
	// written, a store that is not SQLite. Each a clear error, and
	// nothing changed.
	backupBytes, _ := os.ReadFile(target)
	entries := func() []string {
		var names []string
		es, _ := os.ReadDir(dir)
		for _, e := range es {
			names = append(names, e.Name())
		}
		return names
	}
	notDB := filepath.Join(dir, "notes.txt")
	os.WriteFile(notDB, []byte("not a database\n"), 0o600)
	dirBefore := entries()
	for _, tc := range []struct{ name, store, to, want string }{
		{"the target exists", "sqlite:" + live.db, target, "exists; a backup never writes over a file"},
		{"the target's directory cannot be written", "sqlite:" + live.db, "/proc/self/backup.db", "cannot write in /proc/self"},
		{"the target's directory does not exist", "sqlite:" + live.db, filepath.Join(dir, "nope", "b.db"), "does not exist; make it first"},
		{"the store is not a SQLite database", "sqlite:" + notDB, filepath.Join(dir, "x.db"), "file is not a database"},
		{"the store is PostgreSQL", "postgres://repool:pw@127.0.0.1:1/repool", filepath.Join(dir, "x.db"), "is PostgreSQL: back it up with pgBackRest"},
	} {
		out, err := live.backup(tc.store, tc.to)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("server backup, %s = got %v: %q, want an error saying %q", tc.name, err, out, tc.want)
		}
		if strings.Contains(out, "pw@") {
			t.Errorf("server backup, %s = got %q, want no password in it", tc.name, out)
		}
	}
	if after, _ := os.ReadFile(target); !bytes.Equal(after, backupBytes) {
		t.Errorf("the existing backup after the refused ones = changed, want it byte for byte as it was")
	}
	if got := entries(); !slices.Equal(got, dirBefore) {
		t.Errorf("the directory after the refused backups = got %v, want %v (no partial files)", got, dirBefore)
	}

	// The restore, onto the live store's own path (its epoch mark kept),
	// with server restore: refused while the server runs, and for a file
	// that is not a backup; then the server stopped, the backup restored,
	// a server started on it.
	liveID := fileIdentity(t, live.db)
	for _, tc := range []struct{ name, store, from, want string }{
		{"while the server runs", "sqlite:" + live.db, target, "is held by a running server"},
		{"from a live store's database", "sqlite:" + filepath.Join(dir, "other", "repool.db"), live.db, "it is a store's live database"},
		{"from a file that is not a store", "sqlite:" + live.db, notDB, "is not a repool store"},
		{"from a file that does not exist", "sqlite:" + live.db, filepath.Join(dir, "none.db"), "not a file"},
	} {
		out, err := live.run("restore", "--store", tc.store, "--from", tc.from)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("server restore, %s = got %v: %q, want an error saying %q", tc.name, err, out, tc.want)
		}
	}
	if got := fileIdentity(t, live.db); got != liveID {
		t.Fatalf("the live store's database after the refused restores = replaced, want it untouched")
	}
	live.srv.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-live.srv.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the server did not stop within 30 s of SIGTERM")
	}
	out, err = live.run("restore", "--store", "sqlite:"+live.db, "--from", target)
	if err != nil || !strings.Contains(out, ".before-restore-") {
		t.Fatalf("server restore = got %v: %q, want the store restored and where its previous files went", err, out)
	}
	t.Logf("%s", strings.TrimSpace(out))
	restored := startSite(t, bin, live.db)
	if got := restored.get("/api/v1/tenants"); got != wantTenants {
		t.Errorf("tenants on the restored store = got %s, want %s", got, wantTenants)
	}
	heldAt, resAt := 0, 0
	for _, id := range tenants {
		if got := restored.get("/api/v1/tenants/" + id + "/limits"); got != wantLimits[id] {
			t.Errorf("limits of %s on the restored store = got %s, want %s", id, got, wantLimits[id])
		}
		if got := restored.get("/api/v1/tenants/" + id + "/keys"); got != wantKeys[id] {
			t.Errorf("keys of %s on the restored store = got %s, want %s", id, got, wantKeys[id])
		}
		got := resources(t, restored.pool(), keys[id]) // the key authenticates
		if len(got) != len(wantRes[id]) {
			t.Errorf("resources of %s on the restored store = got %d, want %d", id, len(got), len(wantRes[id]))
		}
		for rid, w := range wantRes[id] {
			if g, ok := got[rid]; !ok || !sameResource(g, w) {
				t.Errorf("resource %s of %s on the restored store = got %+v (present %v), want %+v", rid, id, g, ok, w)
			}
		}
		resAt += len(wantRes[id])
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", keys[id])
		for _, l := range wantHeld[id] {
			if _, err := restored.pool().Renew(ctx, &repoolv1.RenewRequest{LeaseId: l.id, FencingToken: l.token, TtlSeconds: 60}); err != nil {
				t.Errorf("Renew of lease %s (token %d) of %s on the restored store = got error %v, want the lease", l.id, l.token, id, err)
			}
		}
		heldAt += len(wantHeld[id])
		// Written after the backup: not in it.
		if _, ok := got[fmt.Sprintf("%s-r%05d", id, len(wantRes[id]))]; ok {
			t.Errorf("resource %s-r%05d, registered after the backup, is on the restored store; want it absent", id, len(wantRes[id]))
		}
	}
	// Tokens go on above every one handed out, those after the backup too
	// (the epoch mark stayed).
	ctx1 := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", keys["t1"])
	if a, err := restored.pool().Acquire(ctx1, &repoolv1.AcquireRequest{Context: "c0", TtlSeconds: 60}); err != nil {
		t.Errorf("Acquire on the restored store = got error %v, want a lease", err)
	} else if a.GetLease().GetFencingToken() <= load.maxToken {
		t.Errorf("a new token on the restored store = got %d, want above %d, the highest handed out before", a.GetLease().GetFencingToken(), load.maxToken)
	}
	if t.Failed() {
		return
	}
	t.Logf("restored: %d tenants, %d resources, %d held leases renewed with their ids and tokens", len(tenants), resAt, heldAt)
}

// fileIdentity is the device and inode of the file at path.
func fileIdentity(t *testing.T, path string) [2]uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return [2]uint64{uint64(st.Dev), st.Ino}
}

// TestBackupOf100kResources measures a backup and a restore of a store of
// 100,000 resources (with statistics on 10,000 of them): server backup
// beside the serving server, then the copy as a new store's database and
// a server on it, from its start until it serves and lists all 100,000.
// It prints measure: lines; the bounds it checks are generous (the
// machine is shared), the figures go to docs/server.md.
func TestBackupOf100kResources(t *testing.T) {
	const n = 100_000
	bin := buildServer(t)
	dir := t.TempDir()
	flags := []string{"--global-resources", "200000", "--default-tenant-share", "100"}
	live := startSite(t, bin, filepath.Join(dir, "live", "repool.db"), flags...)
	m := keyRE.FindStringSubmatch(live.srv.out.String())
	if m == nil {
		t.Fatalf("no demo API key in the first start's output:\n%s", live.srv.out.String())
	}
	key := m[1]
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
	pool := live.pool()
	for from := 0; from < n; from += 5000 {
		var rs []*repoolv1.Resource
		for i := from; i < from+5000; i++ {
			rs = append(rs, &repoolv1.Resource{Id: fmt.Sprintf("r-%06d", i), Capacity: 1})
		}
		if _, err := pool.Register(ctx, &repoolv1.RegisterRequest{Resources: rs}); err != nil {
			t.Fatalf("Register = %v", err)
		}
	}
	for i := 0; i < n; i += 10 {
		if _, err := pool.Report(ctx, &repoolv1.ReportRequest{ResourceId: fmt.Sprintf("r-%06d", i), Context: "c", Outcome: repoolv1.Outcome_SUCCESS}); err != nil {
			t.Fatalf("Report = %v", err)
		}
	}
	live.flushedSince(time.Now())

	target := filepath.Join(dir, "backup.db")
	start := time.Now()
	out, err := live.backup("sqlite:"+live.db, target)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("server backup = got error %v, want nil: %s", err, out)
	}
	t.Logf("%s", strings.TrimSpace(out))

	rdir := filepath.Join(dir, "restored")
	os.Mkdir(rdir, 0o700)
	start = time.Now()
	if out, err := live.run("restore", "--store", "sqlite:"+filepath.Join(rdir, "repool.db"), "--from", target); err != nil {
		t.Fatalf("server restore = got error %v, want nil: %s", err, out)
	}
	restored := startSite(t, bin, filepath.Join(rdir, "repool.db"), flags...)
	got := resources(t, restored.pool(), key)
	restoreTook := time.Since(start)
	if len(got) != n {
		t.Fatalf("resources on the restored store = got %d, want %d", len(got), n)
	}
	withStats := 0
	for _, r := range got {
		if len(r.Contexts) > 0 {
			withStats++
		}
	}
	if withStats != n/10 {
		t.Errorf("resources with statistics on the restored store = got %d, want %d", withStats, n/10)
	}
	fi, _ := os.Stat(target)
	t.Logf("measure: backup_100k_resources_s=%.2f (server backup, process start to exit; %d MB)", took.Seconds(), fi.Size()>>20)
	t.Logf("measure: restore_100k_resources_s=%.2f (server restore, server start, serving, all %d listed)", restoreTook.Seconds(), n)
	t.Logf("measure: load_average=%s", loadAvg())
	if took > 2*time.Minute || restoreTook > 2*time.Minute {
		t.Errorf("backup %v, restore %v: want each within 2 minutes", took, restoreTook)
	}
}

// loadAvg is the 1-, 5- and 15-minute load average.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
