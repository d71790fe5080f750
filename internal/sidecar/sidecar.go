// Package sidecar wires the repool sidecar together: configuration,
// providers (connection, tokens, breaker, retrier, budget), the HTTP API,
// metrics, configuration reloads and shutdown. cmd/sidecar is a thin main
// around it, and end-to-end tests start it the same way.
//
// The sidecar is the backends' only way to a reputation cluster: a
// loopback HTTP/JSON API that holds the credentials and maps each call onto
// the provider's gRPC API through breaker(retry(auth(call))) — see
// provider.Provider.Do.
package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"

	"github.com/repool/repool/internal/buildinfo"
	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/sidecar/config"
	"github.com/repool/repool/internal/sidecar/httpapi"
	"github.com/repool/repool/internal/sidecar/provider"
	"github.com/repool/repool/internal/sidecar/resilience"
	"github.com/repool/repool/internal/sidecar/token"
	"github.com/repool/repool/internal/tracing"
)

// Options are the sidecar's injected dependencies.
type Options struct {
	// Log receives structured logs. Default discards them.
	Log *slog.Logger
	// Registry receives the metrics and is served on /metrics. Default a
	// new registry with the Go and process collectors.
	Registry *prometheus.Registry
	// Clock tells the time and schedules the waits of tokens (refreshes),
	// retriers (backoff), retry budgets and event streams (keep-alives).
	// Default the wall clock. (Circuit breakers read the wall clock
	// themselves: gobreaker reads time.Now.) The breakers' attempt rules
	// and the bulkheads read it too; on the default wall clock they read
	// it through clock.Awake, so that a stall of the sidecar's own process
	// or of its machine is not taken for a provider's silence.
	Clock clock.Clock
	// Loader loads the configuration again for Reload; nil means Reload
	// fails.
	Loader func() (config.Config, error)
	// Reload, when set, triggers a Reload on every receive while Run runs
	// (cmd/sidecar sends SIGHUP here).
	Reload <-chan os.Signal
	// DialOptions are added to every provider connection's options.
	DialOptions []grpc.DialOption
	// Keepalive is the comment interval of idle event streams. Default 15s.
	Keepalive time.Duration
	// SpanExporter, when set, receives the spans instead of the
	// configuration's otlp_endpoint (tests).
	SpanExporter sdktrace.SpanExporter
}

// The heartbeat of the stall-discounting clock (clock.Awake) of the
// breakers' rules and the bulkheads: a beat every stallBeat, and one later
// than stallTolerance past it counts the excess as a stall. A wake-up every
// 10ms costs next to nothing; a stall shorter than 20ms is far below the
// shortest rule (the bulkhead's slow_after, 100ms).
const (
	stallBeat      = 10 * time.Millisecond
	stallTolerance = 10 * time.Millisecond
)

// Sidecar is a running sidecar: New binds the listener and builds the
// providers, Run serves until its context ends, then drains and closes
// everything. Safe for concurrent use.
type Sidecar struct {
	log     *slog.Logger
	clock   clock.Clock
	guards  clock.Clock // the attempt rules' and bulkheads' clock: stalls discounted on the wall clock
	reg     *prometheus.Registry
	loader  func() (config.Config, error)
	reload  <-chan os.Signal
	dialOpt []grpc.DialOption
	tracer  *tracing.Tracer // trace context on every call; spans with otlp_endpoint

	resMetrics  *resilience.Metrics
	tokMetrics  *token.Metrics
	provMetrics *provider.Metrics
	transitions chan resilience.Transition

	ln       net.Listener
	srv      *http.Server
	stopping context.Context // done once shutdown begins: event streams end
	stop     context.CancelFunc

	mu  sync.Mutex // serializes Apply and close
	cfg config.Config
	set atomic.Pointer[providerSet]

	closeOnce sync.Once
	closeErr  error
}

// New validates cfg, builds its providers and binds its listener. Call Run
// to serve, or Close to release what New acquired.
func New(cfg config.Config, opts Options) (_ *Sidecar, err error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	wallClock := opts.Clock == nil
	if wallClock {
		opts.Clock = clock.Real{}
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
		opts.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
			buildinfo.Read().Collector("sidecar"))
	}
	s := &Sidecar{
		log: opts.Log, clock: opts.Clock, reg: opts.Registry, loader: opts.Loader, reload: opts.Reload,
		dialOpt:     opts.DialOptions,
		resMetrics:  resilience.NewMetrics(opts.Registry),
		tokMetrics:  token.NewMetrics(opts.Registry),
		provMetrics: provider.NewMetrics(opts.Registry),
		transitions: make(chan resilience.Transition, 64),
	}
	s.stopping, s.stop = context.WithCancel(context.Background())
	s.guards = opts.Clock
	if wallClock {
		awake := clock.NewAwake(s.stopping, opts.Clock, stallBeat, stallTolerance)
		s.guards = awake
		opts.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "repool_sidecar_stalled_seconds_total",
			Help: "Time the sidecar's process did not run (a stall of it or of its machine), which its breakers' rules and bulkheads do not count as a provider's silence.",
		}, func() float64 { return awake.Stalled().Seconds() }))
	}
	s.set.Store(&providerSet{})
	if s.tracer, err = tracing.New(tracing.Config{OTLPEndpoint: cfg.OTLPEndpoint, Service: "repool-sidecar", Exporter: opts.SpanExporter}); err != nil {
		return nil, err
	}
	s.dialOpt = append(s.tracer.DialOptions(), s.dialOpt...)
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := s.Apply(cfg); err != nil {
		return nil, err
	}
	refused := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "repool_sidecar_connections_refused_total",
		Help: "Connections closed as soon as accepted because the listener held max_connections.",
	})
	if err := opts.Registry.Register(refused); err != nil {
		return nil, err
	}
	if err := opts.Registry.Register(certExpiry{s}); err != nil {
		return nil, err
	}
	if s.ln, err = listen(cfg, refused.Inc); err != nil {
		return nil, err
	}
	hosts := append([]string(nil), cfg.AllowedHosts...)
	if host, _, err := net.SplitHostPort(cfg.Listen); err == nil && host != "" {
		// The address it listens on names the sidecar: a request to it
		// from a web page has an Origin (or Sec-Fetch-Site), which the
		// API refuses.
		hosts = append(hosts, host)
	}
	var origins []string
	for _, o := range cfg.AllowedOrigins {
		c, _ := config.ParseOrigin(o) // Validate checked it
		origins = append(origins, c)
	}
	api, err := httpapi.New(httpapi.Config{
		Providers:      lookup{s},
		Metrics:        promhttp.HandlerFor(opts.Registry, promhttp.HandlerOpts{Registry: opts.Registry}),
		MaxBodyBytes:   cfg.MaxBodyBytes,
		Stopping:       s.stopping,
		Keepalive:      opts.Keepalive,
		Clock:          opts.Clock,
		Log:            opts.Log,
		AllowedHosts:   hosts,
		AllowedOrigins: origins,
	})
	if err != nil {
		return nil, err
	}
	// The trace context of each request (the backend's traceparent, or a
	// new one) is in its context from here on: the calls to the provider
	// carry it, and the lines logged with it show its trace id.
	s.srv = cfg.HTTP.Server(s.tracer.HTTPHandler(api, "sidecar"), slog.NewLogLogger(opts.Log.Handler(), slog.LevelWarn))
	s.log.Info("sidecar ready", "listen", s.Addr(), "providers", cfg.Names(), "redis", cfg.Redis != nil)
	return s, nil
}

// listen binds cfg.Listen (host:port or unix:/path) after checking that it
// is loopback unless allow_remote, and bounds its connections to
// max_connections, calling onRefuse for each connection closed beyond it.
func listen(cfg config.Config, onRefuse func()) (net.Listener, error) {
	addr := cfg.Listen
	if err := config.CheckListen(addr, cfg.AllowRemote); err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	var ln net.Listener
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		var err error
		if ln, err = listenUnix(path, cfg.UnixSocketGroup); err != nil {
			return nil, fmt.Errorf("listen: %w", err)
		}
	} else {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("listen: %w", err)
		}
		if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !cfg.AllowRemote && !tcp.IP.IsLoopback() {
			ln.Close()
			return nil, fmt.Errorf("listen: %s resolved to %v, which is not loopback", addr, tcp.IP)
		}
	}
	limited, err := cfg.HTTP.Limit(ln, onRefuse)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	return limited, nil
}

// listenUnix creates a unix socket at path that only its owner (mode
// 0600), or also group (mode 0660, the group set), may connect to. The
// socket is bound in a new directory only the owner can enter, given its
// mode and group there, and only then renamed to path, so that nobody can
// connect while it still has the mode the umask gave it. A stale socket
// at path is replaced; any other file there is an error.
func listenUnix(path, group string) (net.Listener, error) {
	gid, mode := -1, os.FileMode(0o600)
	if group != "" {
		var err error
		if gid, err = lookupGroup(group); err != nil {
			return nil, err
		}
		mode = 0o660
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		os.Remove(path) // a stale socket of an earlier run
	}
	dir, err := os.MkdirTemp(filepath.Dir(path), ".sidecar-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, err
	}
	ul := ln.(*net.UnixListener)
	ul.SetUnlinkOnClose(false) // the socket moves: unixListener removes it
	if err := setSocketMode(tmp, gid, mode); err != nil {
		ln.Close()
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		return nil, err
	}
	return &unixListener{UnixListener: ul, path: path}, nil
}

func setSocketMode(path string, gid int, mode os.FileMode) error {
	if gid >= 0 {
		if err := os.Chown(path, -1, gid); err != nil {
			return fmt.Errorf("unix_socket_group: %w", err)
		}
	}
	return os.Chmod(path, mode)
}

// lookupGroup resolves a group name or numeric id.
func lookupGroup(group string) (int, error) {
	if id, err := strconv.Atoi(group); err == nil && id >= 0 {
		return id, nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return 0, fmt.Errorf("unix_socket_group %q: %w", group, err)
	}
	return strconv.Atoi(g.Gid)
}

// unixListener removes its socket file when closed.
type unixListener struct {
	*net.UnixListener
	path string
	once sync.Once
}

func (l *unixListener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() { os.Remove(l.path) })
	return err
}

// Addr is the socket's path, not the name it was bound with.
func (l *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

// Addr returns the bound address: host:port, or unix:/path.
func (s *Sidecar) Addr() string {
	if s.ln.Addr().Network() == "unix" {
		return "unix:" + s.ln.Addr().String()
	}
	return s.ln.Addr().String()
}

// Config returns the configuration in effect, defaults applied.
func (s *Sidecar) Config() config.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

// Run serves the HTTP API until ctx ends, reloading the configuration on
// every receive from Options.Reload. Then it stops accepting requests,
// ends event streams, drains in-flight requests for up to shutdown_grace,
// and closes every provider. It returns nil after a clean shutdown.
func (s *Sidecar) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	serveErr := make(chan error, 1)
	wg.Go(func() { serveErr <- s.srv.Serve(s.ln) })
	logDone := make(chan struct{})
	wg.Go(func() { s.logTransitions(logDone) })

	var err error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err = <-serveErr:
			err = fmt.Errorf("serving HTTP: %w", err)
			break loop
		case <-s.reload:
			if rerr := s.Reload(); rerr != nil {
				s.log.Error("configuration reload rejected; the running configuration keeps serving", "err", rerr)
			}
		}
	}
	s.log.Info("sidecar shutting down")
	s.stop() // event streams end now; they would never drain
	grace, cancel := context.WithTimeout(context.Background(), s.Config().ShutdownGrace)
	defer cancel()
	if serr := s.srv.Shutdown(grace); serr != nil {
		s.log.Warn("shutdown grace ran out; closing the remaining connections", "err", serr)
		s.srv.Close()
	}
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	close(logDone)
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// Close closes the listener and every provider's connection and token
// source. Run calls it; call it yourself only for a Sidecar that is not
// run. It is idempotent.
func (s *Sidecar) Close() error {
	s.closeOnce.Do(func() {
		s.stop()
		if s.ln != nil {
			if err := s.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				s.closeErr = err
			}
		}
		s.mu.Lock()
		old := *s.set.Load()
		s.set.Store(&providerSet{})
		s.mu.Unlock()
		var wg sync.WaitGroup
		for _, e := range old {
			e.up.retire()
			wg.Go(e.up.wait)
		}
		wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.tracer.Shutdown(ctx); err != nil {
			s.log.Warn("exporting the last spans", "err", err)
		}
	})
	return s.closeErr
}

// logTransitions logs the breakers' state changes, which the breakers hand
// over without blocking (their callbacks run under a lock).
func (s *Sidecar) logTransitions(done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case t := <-s.transitions:
			level := slog.LevelInfo
			if t.To == resilience.StateOpen {
				level = slog.LevelWarn
			}
			s.log.Log(context.Background(), level, "circuit breaker state changed", "provider", t.Provider,
				"from", t.From.String(), "to", t.To.String(), "reason", t.Reason())
		}
	}
}

// Reload loads the configuration with Options.Loader and applies it. A
// configuration that fails to load or validate is rejected and the running
// one keeps serving.
func (s *Sidecar) Reload() error {
	if s.loader == nil {
		return errors.New("sidecar: no configuration loader to reload from")
	}
	cfg, err := s.loader()
	if err != nil {
		return err
	}
	return s.Apply(cfg)
}
