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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/sidecar/config"
	"github.com/repool/repool/internal/sidecar/httpapi"
	"github.com/repool/repool/internal/sidecar/provider"
	"github.com/repool/repool/internal/sidecar/resilience"
	"github.com/repool/repool/internal/sidecar/token"
)

// Options are the sidecar's injected dependencies.
type Options struct {
	// Log receives structured logs. Default discards them.
	Log *slog.Logger
	// Registry receives the metrics and is served on /metrics. Default a
	// new registry with the Go and process collectors.
	Registry *prometheus.Registry
	// Clock tells the time for tokens and retry budgets. Default the wall
	// clock. (Circuit breakers read the wall clock themselves.)
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
}

// Sidecar is a running sidecar: New binds the listener and builds the
// providers, Run serves until its context ends, then drains and closes
// everything. Safe for concurrent use.
type Sidecar struct {
	log     *slog.Logger
	clock   clock.Clock
	reg     *prometheus.Registry
	loader  func() (config.Config, error)
	reload  <-chan os.Signal
	dialOpt []grpc.DialOption

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
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
		opts.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
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
	s.set.Store(&providerSet{})
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := s.Apply(cfg); err != nil {
		return nil, err
	}
	if s.ln, err = listen(cfg.Listen, cfg.AllowRemote); err != nil {
		return nil, err
	}
	api, err := httpapi.New(httpapi.Config{
		Providers:    lookup{s},
		Metrics:      promhttp.HandlerFor(opts.Registry, promhttp.HandlerOpts{Registry: opts.Registry}),
		MaxBodyBytes: cfg.MaxBodyBytes,
		Stopping:     s.stopping,
		Keepalive:    opts.Keepalive,
		Log:          opts.Log,
	})
	if err != nil {
		return nil, err
	}
	s.srv = &http.Server{
		Handler:           api,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(opts.Log.Handler(), slog.LevelWarn),
	}
	s.log.Info("sidecar ready", "listen", s.Addr(), "providers", cfg.Names(), "redis", cfg.Redis != nil)
	return s, nil
}

// listen binds addr (host:port or unix:/path) after checking that it is
// loopback unless allowRemote.
func listen(addr string, allowRemote bool) (net.Listener, error) {
	if err := config.CheckListen(addr, allowRemote); err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			os.Remove(path) // a stale socket of an earlier run
		}
		ln, err := net.Listen("unix", path)
		if err != nil {
			return nil, fmt.Errorf("listen: %w", err)
		}
		return ln, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !allowRemote && !tcp.IP.IsLoopback() {
		ln.Close()
		return nil, fmt.Errorf("listen: %s resolved to %v, which is not loopback", addr, tcp.IP)
	}
	return ln, nil
}

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
