package sidecar_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/config"
	"github.com/repool/repool/internal/sidecar/fakeserver"
	"github.com/repool/repool/internal/sidecar/resilience"
	"github.com/repool/repool/internal/sidecar/token"
	"github.com/repool/repool/internal/testenv"
)

// loader is a configuration loader the test can change.
type loader struct {
	mu  sync.Mutex
	cfg config.Config
	err error
}

func (l *loader) set(cfg config.Config, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cfg, l.err = cfg, err
}

func (l *loader) load() (config.Config, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cfg, l.err
}

func TestReload(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	slowA := fakeserver.Start(t, fakeserver.Config{
		Acquire: func(_ context.Context, req *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error) {
			if req.GetContext() == "slow" {
				entered <- struct{}{}
				<-release
			}
			return &repoolv1.AcquireResponse{Lease: &repoolv1.Lease{LeaseId: "a", ResourceId: "r", Context: req.GetContext(), FencingToken: 1, ExpiresAt: timestamppb.Now()}}, nil
		},
	})
	b := fakeserver.Start(t, fakeserver.Config{})
	first := config.Config{Providers: map[string]config.Provider{"a": fast(slowA)}}
	l := &loader{}
	sig := make(chan os.Signal, 1)
	h := start(t, first, sidecar.Options{Loader: l.load, Reload: sig})

	t.Run("a bad configuration is rejected and the old one keeps serving", func(t *testing.T) {
		bad := []struct {
			cfg config.Config
			err error
		}{
			{config.Config{}, errors.New("config file sidecar.yaml: yaml: line 3: did not find expected key")},
			{config.Config{Providers: map[string]config.Provider{"a": {Endpoint: "nope"}}}, nil},
		}
		for _, tt := range bad {
			l.set(tt.cfg, tt.err)
			if err := h.s.Reload(); err == nil {
				t.Fatalf("Reload() of a bad configuration = nil, want an error")
			}
			if r := h.acquire("a"); r.status != 200 {
				t.Fatalf("acquire after a rejected reload = %d %s, want 200", r.status, r.raw)
			}
		}
	})

	t.Run("in-flight calls survive the removal of their provider", func(t *testing.T) {
		inflight := make(chan response, 1)
		go func() { inflight <- h.do("POST", "/v1/providers/a/acquire", `{"context":"slow","ttl_seconds":30}`) }()
		<-entered
		l.set(config.Config{Providers: map[string]config.Provider{"b": fast(b)}}, nil)
		if err := h.s.Reload(); err != nil {
			t.Fatalf("Reload() = %v", err)
		}
		if r := h.acquire("a"); r.status != 404 || r.errCode() != "unknown_provider" {
			t.Fatalf("acquire on the removed provider = %d %s, want 404 unknown_provider", r.status, r.raw)
		}
		if r := h.acquire("b"); r.status != 200 {
			t.Fatalf("acquire on the added provider = %d %s, want 200", r.status, r.raw)
		}
		close(release)
		if r := <-inflight; r.status != 200 {
			t.Fatalf("the call in flight during the reload = %d %s, want 200", r.status, r.raw)
		}
	})

	t.Run("policy changes keep the connection and the token", func(t *testing.T) {
		issued := b.Calls("IssueToken")
		pc := fast(b)
		pc.Breaker.MinRequests = 7
		pc.Timeout = 1500 * time.Millisecond
		l.set(config.Config{Providers: map[string]config.Provider{"b": pc}}, nil)
		sig <- syscall.SIGHUP // the Run loop's reload, as on a real SIGHUP
		testenv.Eventually(t, 5*time.Second, "the reload through the signal channel", func() bool {
			return h.s.Config().Providers["b"].Breaker.MinRequests == 7
		})
		if r := h.acquire("b"); r.status != 200 {
			t.Fatalf("acquire after the policy change = %d %s, want 200", r.status, r.raw)
		}
		if got := b.Calls("IssueToken"); got != issued {
			t.Fatalf("IssueToken calls after a policy-only reload = got %d more, want none", got-issued)
		}
	})

	t.Run("a provider switched to a named policy, then the policy changed", func(t *testing.T) {
		issued := b.Calls("IssueToken")
		pc := fast(b)
		pc.Policy = "outage"
		pc.Retry = resilience.RetryPolicy{} // the policy's
		pc.Breaker.MinRequests = 0          // the policy's; the provider's other breaker fields stay
		policies := map[string]resilience.Policy{}
		for _, minRequests := range []uint32{9, 11} {
			policies["outage"] = resilience.Policy{Breaker: resilience.BreakerPolicy{MinRequests: minRequests, OpenTimeout: time.Minute}}
			l.set(config.Config{Providers: map[string]config.Provider{"b": pc}, Policies: policies}, nil)
			if err := h.s.Reload(); err != nil {
				t.Fatalf("Reload() = %v", err)
			}
			got := h.s.Config().Providers["b"]
			if got.Breaker.MinRequests != minRequests || got.Breaker.ConsecutiveFailures != -1 {
				t.Fatalf("breaker after the reload = %+v, want the policy's min_requests %d and the provider's consecutive_failures -1", got.Breaker, minRequests)
			}
			if got.Retry != (resilience.RetryPolicy{}).WithDefaults() {
				t.Fatalf("retry after the reload = %+v, want the policy's (the defaults)", got.Retry)
			}
			if r := h.acquire("b"); r.status != 200 {
				t.Fatalf("acquire over policy %q = %d %s, want 200", pc.Policy, r.status, r.raw)
			}
		}
		l.set(config.Config{Providers: map[string]config.Provider{"b": pc}, Policies: map[string]resilience.Policy{}}, nil)
		if err := h.s.Reload(); err == nil || !strings.Contains(err.Error(), `providers.b.policy "outage": no such policy`) {
			t.Fatalf("Reload() without the policy = %v, want providers.b.policy \"outage\": no such policy", err)
		}
		if r := h.acquire("b"); r.status != 200 {
			t.Fatalf("acquire after the rejected reload = %d %s, want 200", r.status, r.raw)
		}
		if got := b.Calls("IssueToken"); got != issued {
			t.Fatalf("IssueToken calls after policy-only reloads = got %d more, want none", got-issued)
		}
	})
}

func TestListenIsLoopbackOnly(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{})
	tests := []struct {
		name   string
		listen string
		remote bool
		want   string // error substring; "" to succeed
	}{
		{"all interfaces refused", "0.0.0.0:0", false, "not a loopback address"},
		{"all interfaces IPv6 refused", "[::]:0", false, "not a loopback address"},
		{"empty host refused", ":0", false, "listen"},
		{"all interfaces with allow_remote", "0.0.0.0:0", true, ""},
		{"127.0.0.1", "127.0.0.1:0", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := one("p", fast(fake))
			cfg.Listen, cfg.AllowRemote = tt.listen, tt.remote
			s, err := sidecar.New(cfg, sidecar.Options{Registry: prometheus.NewRegistry()})
			if s != nil {
				defer s.Close()
			}
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("sidecar.New(listen %q) = %v, want success", tt.listen, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("sidecar.New(listen %q) = %v, want an error containing %q", tt.listen, err, tt.want)
			}
		})
	}
}

func TestUnixSocket(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{})
	path := filepath.Join(t.TempDir(), "sidecar.sock")
	cfg := one("p", fast(fake))
	cfg.Listen = "unix:" + path
	h := start(t, cfg, sidecar.Options{})
	h.base = "http://localhost" // what curl --unix-socket sends too
	h.client = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}}}
	if r := h.acquire("p"); r.status != 200 {
		t.Fatalf("acquire over the unix socket = %d %s, want 200", r.status, r.raw)
	}
}

func TestLifecycleLeaksNoGoroutine(t *testing.T) {
	redisAddr, stopRedis := testenv.Redis(t)
	fake := fakeserver.Start(t, fakeserver.Config{})
	other := fakeserver.Start(t, fakeserver.Config{})
	snapshot := goleak.IgnoreCurrent()

	redis := &config.Redis{Redis: token.Redis{Addr: redisAddr}}
	cfg := config.Config{Listen: "127.0.0.1:0", Redis: redis,
		Providers: map[string]config.Provider{"p": fast(fake), "q": fast(other)}}
	l := &loader{}
	s, err := sidecar.New(cfg, sidecar.Options{Registry: prometheus.NewRegistry(), Loader: l.load, Keepalive: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("sidecar.New() = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	h := &harness{t: t, s: s, base: "http://" + s.Addr(), client: &http.Client{}}

	for _, p := range []string{"p", "q"} {
		if r := h.acquire(p); r.status != 200 {
			t.Fatalf("acquire %s = %d %s", p, r.status, r.raw)
		}
	}
	kept := openEvents(t, h, "p")     // open across the reload and the shutdown
	replaced := openEvents(t, h, "q") // ended by the reload

	// p changes only its timeout: its upstream, and the stream on it, stay.
	// q gets a new endpoint: its old upstream is retired, which ends the
	// stream on it, and its connection closes.
	p := fast(fake)
	p.Timeout = 3 * time.Second
	l.set(config.Config{Listen: "127.0.0.1:0", Redis: redis,
		Providers: map[string]config.Provider{"p": p, "q": fast(fake)}}, nil)
	if err := s.Reload(); err != nil {
		t.Fatalf("Reload() = %v", err)
	}
	if err := replaced.ended(t); !errors.Is(err, io.EOF) {
		t.Fatalf("event stream of q after the reload replaced its endpoint = ended with %v, want the end of the body", err)
	}
	kept.stillOpen(t)
	for _, p := range []string{"p", "q"} {
		if r := h.acquire(p); r.status != 200 {
			t.Fatalf("acquire %s after reload = %d %s", p, r.status, r.raw)
		}
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run() = %v", err)
	}
	// The shutdown ended the stream itself, rather than the grace running
	// out and the connection being cut.
	if err := kept.ended(t); !errors.Is(err, io.EOF) {
		t.Fatalf("event stream of p after the shutdown = ended with %v, want the end of the body", err)
	}
	h.client.CloseIdleConnections()
	fake.Stop()
	other.Stop()
	stopRedis()
	goleak.VerifyNone(t, snapshot)
}

// eventStream is an open event stream read in the background: it counts
// the keepalive comments and records how the body ended.
type eventStream struct {
	body       io.ReadCloser
	keepalives atomic.Int64
	done       chan struct{} // closed when the body has ended
	err        error         // how it ended; read after done
}

// openEvents opens a provider's event stream. The test's end closes it.
func openEvents(t *testing.T, h *harness, provider string) *eventStream {
	t.Helper()
	req, _ := http.NewRequest("GET", h.base+"/v1/providers/"+provider+"/events", nil)
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatalf("GET %s events = %v", provider, err)
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		t.Fatalf("GET %s events = %d, want 200", provider, resp.StatusCode)
	}
	es := &eventStream{body: resp.Body, done: make(chan struct{})}
	go func() {
		defer close(es.done)
		r := bufio.NewReader(resp.Body)
		for {
			line, err := r.ReadString('\n')
			if line == ": keepalive\n" {
				es.keepalives.Add(1)
			}
			if err != nil {
				es.err = err
				return
			}
		}
	}()
	t.Cleanup(func() { resp.Body.Close(); <-es.done })
	return es
}

// ended waits up to 5s for the stream to end, closes it and returns how
// it ended.
func (es *eventStream) ended(t *testing.T) error {
	t.Helper()
	select {
	case <-es.done:
	case <-time.After(5 * time.Second):
		t.Fatal("event stream still open after 5s, want it ended")
	}
	es.body.Close()
	return es.err
}

// stillOpen fails unless the stream goes on: three more keepalives (10ms
// apart) arrive without its end. At most one of them can have been on its
// way already.
func (es *eventStream) stillOpen(t *testing.T) {
	t.Helper()
	want := es.keepalives.Load() + 3
	testenv.Eventually(t, 5*time.Second, "three more keepalives on the event stream", func() bool {
		select {
		case <-es.done:
			t.Fatalf("event stream ended with %v, want it still open", es.err)
		default:
		}
		return es.keepalives.Load() >= want
	})
}

// TestStuckEventClientDoesNotPinARemovedProvider: a client that opens an
// event stream and never reads it does not hold the stream's handler (and
// with it the removed provider's upstream) once a reload removes the
// provider: the write it is stuck in is cut short.
func TestStuckEventClientDoesNotPinARemovedProvider(t *testing.T) {
	big := strings.Repeat("x", 16<<10)
	flood := fakeserver.Start(t, fakeserver.Config{
		SubscribeEvents: func(_ *repoolv1.SubscribeEventsRequest, stream grpc.ServerStreamingServer[repoolv1.Event]) error {
			for i := uint64(1); ; i++ {
				if err := stream.Send(&repoolv1.Event{Kind: repoolv1.EventKind_EVENT_KIND_BLOCKED, Seq: i, Detail: big}); err != nil {
					return err
				}
			}
		},
	})
	other := fakeserver.Start(t, fakeserver.Config{})
	l := &loader{}
	h := start(t, one("p", fast(flood)), sidecar.Options{Loader: l.load, Reload: make(chan os.Signal)})
	c, err := net.Dial("tcp", h.s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(4096)
	if _, err := io.WriteString(c, "GET /v1/providers/p/events HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil { // never read
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the events handler to run", func() bool { return eventsHandlers() == 1 && flood.Calls("SubscribeEvents") == 1 })
	time.Sleep(200 * time.Millisecond) // real time: the kernel's socket buffers fill, no event says when
	l.set(config.Config{Providers: map[string]config.Provider{"q": fast(other)}}, nil)
	if err := h.s.Reload(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the events handler of the removed provider to end", func() bool { return eventsHandlers() == 0 })
}

// eventsHandlers counts the goroutines running the events handler.
func eventsHandlers() int {
	buf := make([]byte, 1<<22)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "httpapi.(*API).events(")
}
