package crash

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
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

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/open"
	"github.com/repool/repool/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var (
	kills = flag.Int("crash.kills", 20, "SIGKILLs per store and mode")
	seed  = flag.Uint64("crash.seed", 0, "random seed (0: from the clock; the seed is logged)")
)

// The report flush window under test: the server's default.
const reportFlush = time.Second

// callsPerSecond paces the load's calls.
const callsPerSecond = 1500

// Resources: capacity-1 lease resources, report resources (one context
// each, nothing else reported on them) and ids that are registered and
// then deregistered.
const (
	leaseResources  = 48
	reportResources = 6
)

// TestCrash kills the real server with SIGKILL at random moments under a
// write load and checks, after each restart on the same store, that
// nothing it acknowledged was lost: registrations lost 0, deregistrations
// resurrected 0, leases forgotten 0, resources leased beyond capacity 0,
// fencing token regressions 0, and reports lost only within the report
// flush window (none with --durable-reports).
func TestCrash(t *testing.T) {
	bin := buildServer(t)
	s := *seed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("crash: seed %d (rerun with -args -crash.seed %d)", s, s)
	for _, mode := range []struct {
		name    string
		store   func(t testing.TB) string
		flags   []string
		durable bool
	}{
		{"sqlite", sqliteStore, nil, false},
		{"sqlite-durable-reports", sqliteStore, []string{"--durable-reports"}, true},
		{"postgres", testenv.Postgres, nil, false},
		{"postgres-ha", testenv.Postgres, []string{"--ha", "--ha-name", "crash"}, false},
	} {
		t.Run(mode.name, func(t *testing.T) {
			h := &harness{t: t, bin: bin, store: mode.store(t), flags: mode.flags, durable: mode.durable,
				ha: slices.Contains(mode.flags, "--ha"), rng: rand.New(rand.NewPCG(s, uint64(len(mode.name)))), l: newLedger()}
			h.run(*kills)
		})
	}
}

// buildServer builds the real server binary into a temporary directory.
func buildServer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "server")
	build := exec.Command("go", "build", "-o", bin, "github.com/repool/repool/cmd/server")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/server = got error %v, want nil\n%s", err, out)
	}
	return bin
}

func freeAddr(t *testing.T) string { return "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)) }

func sqliteStore(t testing.TB) string {
	return "sqlite:" + filepath.Join(t.TempDir(), "data", "repool.db")
}

type harness struct {
	t       *testing.T
	bin     string
	store   string
	flags   []string
	durable bool
	ha      bool
	rng     *rand.Rand
	l       *ledger

	grpcAddr, httpAddr string
	key                string
	nextID             int

	// Report flush rounds: the ends of the server's completed rounds seen
	// in this cycle (from /metrics), when the cycle's load began, and the
	// windows of reports at risk found at each kill.
	rounds     []time.Time
	cycleStart time.Time
	windows    []time.Duration
}

// server is one run of the server binary.
type server struct {
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func (h *harness) start() *server {
	h.t.Helper()
	args := append([]string{"run", "--store", h.store, "--grpc-addr", h.grpcAddr, "--http-addr", h.httpAddr,
		"--rate-per-second", "1000000", "--burst", "1000000", "--checkpoint-interval", "1s", "--log-level", "info"}, h.flags...)
	cmd := exec.Command(h.bin, args...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		h.t.Fatalf("starting %s = got error %v, want nil", h.bin, err)
	}
	s := &server{cmd: cmd, out: out, done: make(chan struct{})}
	go func() { cmd.Wait(); close(s.done) }()
	h.t.Cleanup(func() { s.kill() })
	return s
}

func (s *server) kill() {
	select {
	case <-s.done:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

var keyRE = regexp.MustCompile(`demo API key:\s+(\S+)`)

// ready waits until the server serves the data plane, and fails the test
// with its output if it exits or takes longer than 30 s.
func (h *harness) ready(s *server) {
	h.t.Helper()
	path := "/readyz"
	if h.ha {
		path = "/readyz/active"
	}
	ready := false
	defer func() {
		if !ready { // Eventually gave up
			h.t.Logf("server output:\n%s", s.out.String())
		}
	}()
	testenv.Eventually(h.t, 30*time.Second, "the server to answer GET "+path+" with 200", func() bool {
		select {
		case <-s.done:
			h.t.Fatalf("server exited before it was ready:\n%s", s.out.String())
		default:
		}
		resp, err := http.Get("http://" + h.httpAddr + path)
		if err != nil {
			return false
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	ready = true
}

func (h *harness) run(kills int) {
	t := h.t
	h.grpcAddr, h.httpAddr = freeAddr(t), freeAddr(t)

	s := h.start()
	h.ready(s)
	// The server is ready (it serves) a moment before it prints the demo
	// tenant's key: the key is printed last, once nothing can fail.
	var m []string
	testenv.Eventually(t, 30*time.Second, "the first start to print the demo API key", func() bool {
		m = keyRE.FindStringSubmatch(s.out.String())
		return m != nil
	})
	h.key = m[1]
	conn, err := grpc.NewClient(h.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := repoolv1.NewPoolServiceClient(conn)
	h.setup(c)

	var problems []string
	fail := func(ps []string) {
		problems = append(problems, ps...)
		if len(ps) > 0 {
			more := ""
			if len(ps) > 5 {
				ps, more = ps[:5], fmt.Sprintf(" (and %d more)", len(ps)-5)
			}
			t.Errorf("after kill %d: %s%s", h.l.counts.Kills, strings.Join(ps, "; "), more)
		}
	}
	for k := 0; k < kills; k++ {
		// Load for a random while, the kill landing anywhere: in a
		// journal commit, a report flush, a compaction.
		loadFor := time.Duration(h.rng.Int64N(int64(3*time.Second))) + 50*time.Millisecond
		fail(h.load(c, loadFor))
		killedAt := time.Now()
		s.kill()
		last := s.out.String()
		h.l.counts.Kills++
		fail(h.checkJournal())
		s = h.start()
		if h.rng.IntN(5) == 0 {
			// Killed again during its start: restore, epoch bump, listeners.
			time.Sleep(time.Duration(h.rng.Int64N(int64(300 * time.Millisecond)))) // a kill at a random moment of another process's start
			s.kill()
			h.l.counts.Kills++
			h.l.counts.KillsBeforeReady++
			s = h.start()
		}
		h.ready(s)
		// A report is written by the first flush round after it, which
		// may still be running (or waiting for the store) at the kill.
		// Reports acknowledged before the round that ended before the
		// last one seen began are durable: that round started after them.
		durableBefore := killedAt
		if !h.durable {
			durableBefore = h.cycleStart
			if n := len(h.rounds); n >= 2 {
				durableBefore = h.rounds[n-2]
				h.windows = append(h.windows, killedAt.Sub(durableBefore))
			}
		}
		if ps := h.verify(c, durableBefore); len(ps) > 0 {
			t.Logf("output of the server killed before these findings:\n%s", last)
			fail(ps)
		}
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.done

	n := h.l.counts
	t.Logf("crash: %s: kills %d (%d before ready); acknowledged: registered %d, deregistered %d, leases %d, released %d, reports %d",
		t.Name(), n.Kills, n.KillsBeforeReady, n.Registered, n.Deregistered, n.Granted, n.Released, n.Report)
	t.Logf("crash: %s: checked %d registrations and %d live leases after restarts", t.Name(), n.RegistrationsChecked, n.LeasesChecked)
	fmt.Printf("measure: %s registrations_lost=%d deregistrations_resurrected=%d leases_forgotten=%d journal_mismatches=%d over_capacity=%d token_regressions=%d reports_lost=%.1f reports_lost_beyond_window=%.1f\n",
		t.Name(), n.LostRegistrations, n.ResurrectedDeregistrations, n.ForgottenLeases, n.JournalMismatches, n.OverCapacity, n.TokenRegressions, n.ReportsLost, n.ReportsLostBeyondWindow)
	if len(h.windows) > 0 {
		w := slices.Clone(h.windows)
		slices.Sort(w)
		fmt.Printf("measure: %s report_window_median_s=%.2f report_window_max_s=%.2f (time from the start of the last flush that completed to the kill, %d kills)\n",
			t.Name(), w[len(w)/2].Seconds(), w[len(w)-1].Seconds(), len(w))
	}
	if n.Kills < kills {
		t.Errorf("kills = got %d, want at least %d", n.Kills, kills)
	}
	if n.Granted == 0 || n.Registered == 0 || n.Report == 0 || n.LeasesChecked == 0 {
		t.Errorf("the load acknowledged too little to check anything: %+v", n)
	}
}

func (h *harness) ctx() context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "x-api-key", h.key)
}

// leaseLabels mark the lease resources: Acquire asks for them, so every
// lease is on a capacity-1 resource that nothing removes.
var leaseLabels = map[string]string{"pool": "lease"}

func leaseID(i int) string  { return fmt.Sprintf("r-%02d", i) }
func reportID(i int) string { return fmt.Sprintf("p-%d", i) }

// setup registers the lease and report resources.
func (h *harness) setup(c repoolv1.PoolServiceClient) {
	var res []*repoolv1.Resource
	for i := range leaseResources {
		res = append(res, &repoolv1.Resource{Id: leaseID(i), Capacity: 1, Labels: leaseLabels})
	}
	for i := range reportResources {
		res = append(res, &repoolv1.Resource{Id: reportID(i), Capacity: 1000})
	}
	if _, err := c.Register(h.ctx(), &repoolv1.RegisterRequest{Resources: res}); err != nil {
		h.t.Fatalf("Register(setup) = got error %v, want nil", err)
	}
	for _, r := range res {
		h.l.setReg(r.Id, regAcked)
	}
}

// load runs workers for d; each call's outcome goes into the ledger.
func (h *harness) load(c repoolv1.PoolServiceClient, d time.Duration) []string {
	ctx, cancel := context.WithTimeout(h.ctx(), d)
	defer cancel()
	h.cycleStart, h.rounds = time.Now(), nil
	watched := make(chan struct{})
	go func() { defer close(watched); h.watchRounds(ctx) }()
	defer func() { <-watched }()
	var mu sync.Mutex
	var problems []string
	var wg sync.WaitGroup
	// Paced, so that the harness does not take the machine from the tests
	// that run beside it: enough calls to land kills in every kind of write.
	pace := rate.NewLimiter(callsPerSecond, 10)
	for w := range 6 {
		rng := rand.New(rand.NewPCG(h.rng.Uint64(), uint64(w)))
		wg.Go(func() {
			for pace.Wait(ctx) == nil {
				if ps := h.step(ctx, c, rng); len(ps) > 0 {
					mu.Lock()
					problems = append(problems, ps...)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return problems
}

var roundRE = regexp.MustCompile(`(?m)^repool_checkpoint_last_full_success_timestamp_seconds (\S+)$`)

// watchRounds reads the end of the server's last complete flush round from
// /metrics every 50 ms until ctx ends, and keeps each new one.
func (h *harness) watchRounds(ctx context.Context) {
	for ctx.Err() == nil {
		if resp, err := http.Get("http://" + h.httpAddr + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if m := roundRE.FindSubmatch(b); m != nil {
				if v, err := strconv.ParseFloat(string(m[1]), 64); err == nil && v > 0 {
					at := time.Unix(0, int64(v*1e9))
					if n := len(h.rounds); n == 0 || at.After(h.rounds[n-1]) {
						h.rounds = append(h.rounds, at)
					}
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond): // sampling a real process's metrics
		}
	}
}

// newID returns a resource id never used before in the run.
func (h *harness) newID(prefix string) string {
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	h.nextID++
	return fmt.Sprintf("%s-%d", prefix, h.nextID)
}

// step makes one randomly chosen call and records what was acknowledged.
func (h *harness) step(ctx context.Context, c repoolv1.PoolServiceClient, rng *rand.Rand) []string {
	switch r := rng.IntN(100); {
	case r < 10: // a resource registered, then removed
		id := h.newID("d")
		h.l.setReg(id, regDoubt)
		if _, err := c.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: id, Capacity: 1}}}); err != nil {
			return nil
		}
		h.l.setReg(id, regAcked)
		h.l.setReg(id, deregSending)
		if _, err := c.Deregister(ctx, &repoolv1.DeregisterRequest{ResourceIds: []string{id}}); err != nil {
			return nil
		}
		h.l.setReg(id, deregAcked)
	case r < 15: // a resource registered and kept
		id := h.newID("k")
		h.l.setReg(id, regDoubt)
		if _, err := c.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: id, Capacity: 1}}}); err == nil {
			h.l.setReg(id, regAcked)
		}
	case r < 65: // a lease on a capacity-1 resource, released most of the time
		ttl := 1 + rng.Int32N(10)
		resp, err := c.Acquire(ctx, &repoolv1.AcquireRequest{Context: "c", TtlSeconds: ttl, Labels: leaseLabels})
		if err != nil {
			return nil
		}
		ackedAt := time.Now()
		g := resp.GetLease()
		ps := h.l.granted(lease{id: g.GetLeaseId(), resource: g.GetResourceId(), token: g.GetFencingToken(), expires: g.GetExpiresAt().AsTime()}, ackedAt)
		if rng.IntN(10) < 6 {
			h.l.setLease(g.GetLeaseId(), releasing)
			if _, err := c.Release(ctx, &repoolv1.ReleaseRequest{LeaseId: g.GetLeaseId(), FencingToken: g.GetFencingToken(), Outcome: repoolv1.Outcome_SUCCESS}); err == nil {
				h.l.setLease(g.GetLeaseId(), released)
			}
		}
		return ps
	default: // a report on a report resource
		id := reportID(rng.IntN(reportResources))
		if _, err := c.Report(ctx, &repoolv1.ReportRequest{ResourceId: id, Context: "rep", Outcome: repoolv1.Outcome_SUCCESS}); err == nil {
			h.l.reported(id, time.Now())
		}
	}
	return nil
}

// checkJournal reads the killed server's store directly: every live lease
// the ledger holds is journaled with its token and expiry.
func (h *harness) checkJournal() []string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := open.Store(ctx, h.store, store.Options{ReadOnly: true})
	if err != nil {
		return []string{fmt.Sprintf("opening the store after the kill: %v", err)}
	}
	defer st.Close()
	rows, err := st.LoadLeases(ctx, "demo")
	if err != nil {
		return []string{fmt.Sprintf("LoadLeases after the kill: %v", err)}
	}
	byID := map[string]store.LeaseRow{}
	for _, r := range rows {
		byID[strconv.FormatUint(r.ID, 10)] = r
	}
	var problems []string
	for _, ls := range h.l.liveLeases(time.Now(), 0) {
		r, ok := byID[ls.id]
		switch {
		case !ok:
			h.l.counts.JournalMismatches++
			problems = append(problems, fmt.Sprintf("live lease %s on %s is not in the journal", ls.id, ls.resource))
		case r.Token != ls.token || r.ExpiresAt != ls.expires.UnixNano() || r.ResourceID != ls.resource:
			h.l.counts.JournalMismatches++
			problems = append(problems, fmt.Sprintf("lease %s journaled as %+v, acknowledged as token %d on %s expiring %d", ls.id, r, ls.token, ls.resource, ls.expires.UnixNano()))
		}
	}
	return problems
}

// verify checks the restarted server against the ledger.
func (h *harness) verify(c repoolv1.PoolServiceClient, durableBefore time.Time) []string {
	ctx, cancel := context.WithTimeout(h.ctx(), 30*time.Second)
	defer cancel()
	var problems []string
	// Resources: every acknowledged registration is there, no
	// acknowledged removal came back.
	held := map[string]bool{}
	token := ""
	for {
		resp, err := c.ListResources(ctx, &repoolv1.ListResourcesRequest{PageSize: 500, PageToken: token})
		if err != nil {
			return append(problems, fmt.Sprintf("ListResources after restart: %v", err))
		}
		for _, r := range resp.GetResources() {
			held[r.GetId()] = true
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	h.l.mu.Lock()
	for id, s := range h.l.regs {
		switch {
		case s == regAcked && !held[id]:
			h.l.counts.LostRegistrations++
			problems = append(problems, fmt.Sprintf("acknowledged registration of %s lost", id))
		case s == deregAcked && held[id]:
			h.l.counts.ResurrectedDeregistrations++
			problems = append(problems, fmt.Sprintf("acknowledged removal of %s undone", id))
		}
		if s == regAcked || s == deregAcked {
			h.l.counts.RegistrationsChecked++
		}
		if s == deregAcked {
			delete(h.l.regs, id) // checked once is enough: never registered again
		}
	}
	h.l.mu.Unlock()

	// Leases: each live one is still held, by its id and token.
	for _, ls := range h.l.liveLeases(time.Now(), 2*time.Second) {
		h.l.mu.Lock()
		h.l.counts.LeasesChecked++
		h.l.mu.Unlock()
		_, err := c.Report(ctx, &repoolv1.ReportRequest{ResourceId: ls.resource, Context: "c", Outcome: repoolv1.Outcome_SUCCESS, LeaseId: ls.id, FencingToken: ls.token})
		if err != nil {
			code := status.Code(err)
			if code == codes.NotFound || code == codes.FailedPrecondition || code == codes.InvalidArgument {
				h.l.mu.Lock()
				h.l.counts.ForgottenLeases++
				h.l.mu.Unlock()
				problems = append(problems, fmt.Sprintf("lease %s (token %d) on %s forgotten: %v", ls.id, ls.token, ls.resource, err))
				continue
			}
			return append(problems, fmt.Sprintf("Report(lease %s) after restart: %v", ls.id, err))
		}
	}

	// Reports: only the flush window may be missing.
	shown := map[string]float64{}
	for i := range reportResources {
		resp, err := c.GetResource(ctx, &repoolv1.GetResourceRequest{Id: reportID(i)})
		if err != nil {
			return append(problems, fmt.Sprintf("GetResource(%s) after restart: %v", reportID(i), err))
		}
		for _, cs := range resp.GetResource().GetContexts() {
			if cs.GetContext() == "rep" {
				shown[reportID(i)] = cs.GetSuccesses()
			}
		}
	}
	problems = append(problems, h.l.checkReports(shown, durableBefore, time.Now())...)
	h.l.forget(time.Now())
	return problems
}
