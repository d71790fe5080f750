// Package server wires repool's server together: the store, the per-tenant
// pools, authentication, budgets and request limits, the gRPC data plane,
// the HTTP control plane, health, metrics, checkpoints and the audit trail.
// cmd/server is a thin main around it, and end-to-end tests start it the
// same way.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/repool/repool/internal/audit"
	"github.com/repool/repool/internal/auth"
	"github.com/repool/repool/internal/budget"
	"github.com/repool/repool/internal/buildinfo"
	"github.com/repool/repool/internal/callbudget"
	"github.com/repool/repool/internal/checkpoint"
	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/control"
	"github.com/repool/repool/internal/dataplane"
	"github.com/repool/repool/internal/journal"
	"github.com/repool/repool/internal/lb/agent"
	"github.com/repool/repool/internal/limits"
	"github.com/repool/repool/internal/netlimit"
	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/ratelimit"
	"github.com/repool/repool/internal/retention"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/open"
	"github.com/repool/repool/internal/tenants"
	"github.com/repool/repool/internal/tlsconf"
	"github.com/repool/repool/internal/token"
	"github.com/repool/repool/internal/tracing"
)

// Options are the server's injected dependencies.
type Options struct {
	// Log receives structured logs. Default discards them.
	Log *slog.Logger
	// Out receives the first-start banner (demo key, operator token).
	// Default discards it.
	Out io.Writer
	// Clock tells the time and schedules the server's loops and waits (the
	// tick, the report flush, the compaction, the HA elector, the TLS
	// reload, the shutdown grace). Default the wall clock, as
	// clock.Anchored reads it.
	Clock clock.Clock
	// PoolClock is the pools' time: lease expiry, decay, cooldowns.
	// Default Clock if set, else a clock.Coarse with a millisecond
	// resolution: Report and Acquire read the time on every call, and a
	// vDSO clock read is a tenth of a Report's cost.
	PoolClock clock.Clock
	// SpanExporter, when set, receives the data plane's spans instead of
	// Config.OTLPEndpoint's collector (tests).
	SpanExporter sdktrace.SpanExporter
}

// Server is a running repool server. Create it with New, run it with Run.
type Server struct {
	cfg       Config
	log       *slog.Logger
	clock     clock.Clock
	poolClock clock.Clock
	reg       *prometheus.Registry

	store   store.Store
	watched *watchedStore // store, as the server's writes see it
	writes  *writeHealth  // whether the store takes this server's writes
	mode    mode          // single or elected: how the server holds the right to write
	journal *journal.Writer
	signer  *token.Signer
	epoch   atomic.Uint32
	pools   *tenants.Registry
	svc     *dataplane.Service
	cp      *checkpoint.Checkpointer
	retain  *retention.Pruner
	audit   *audit.Writer
	control *control.API
	health  *health.Server
	// healthMu orders the gRPC health service's updates (syncHealth).
	healthMu sync.Mutex

	refusedConns *prometheus.CounterVec // connections closed for being over a listener's bound

	life  context.Context // cancelled when Run begins to shut down
	stop  context.CancelFunc
	ready atomic.Bool // restored (standby: connected) and serving
	lead  atomic.Bool // the active server
	lost  atomic.Bool // the store's claim was lost: write nothing more
	// started is when New returned; leaderSince when this server last
	// became active (Unix ns; 0 before its first term). configHash is the
	// status's configuration hash.
	started     time.Time
	leaderSince atomic.Int64
	configHash  string
	grpc        *grpc.Server
	grpcFair    *netlimit.Listener // grpcLn, which Attribute reports tenants' calls to
	http        *http.Server
	grpcLn      net.Listener
	httpLn      net.Listener
	tls         *tlsconf.Server // nil: plaintext
	tracer      *tracing.Tracer // spans of the data plane's calls, when Config.OTLPEndpoint is set

	storeURL open.URL           // Config.Store, parsed
	rules    control.LimitRules // defaults and bounds of tenants' limits
	tenants  *tenants.Lifecycle // every tenant's pool and limits in force
}

// New opens the store, binds the gRPC and HTTP listeners and restores every
// tenant's pool; the server reports ready once restore and budget
// accounting are done. On an empty store it then creates the demo tenant
// and prints its API key and an operator token to Options.Out: last, so
// that a start that fails (a port in use) spends no secret and creates no
// tenant. Call Run to serve.
func New(ctx context.Context, cfg Config, opts Options) (_ *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	s := &Server{cfg: cfg, log: opts.Log, clock: opts.Clock, poolClock: opts.Clock, reg: prometheus.NewRegistry(),
		rules: cfg.LimitRules()}
	s.life, s.stop = context.WithCancel(context.Background())
	if opts.Clock == nil {
		s.clock = clock.NewAnchored(0)
		s.poolClock = clock.NewCoarse(s.life, time.Millisecond)
	}
	if opts.PoolClock != nil {
		s.poolClock = opts.PoolClock
	}
	defer func() {
		if err != nil {
			s.stop()
			// Whatever New bound or opened before it failed, so that a retry
			// in the same process finds its ports free.
			for _, ln := range []net.Listener{s.grpcLn, s.httpLn} {
				if ln != nil {
					ln.Close()
				}
			}
			if s.mode != nil {
				s.mode.release()
			}
			if s.store != nil {
				s.store.Close()
			}
		}
	}()
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildinfo.Read().Collector("server"))
	s.refusedConns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "repool_connections_refused_total",
		Help: "Connections closed as soon as accepted because the listener held its most (--grpc-max-connections, --http-max-connections).",
	}, []string{"listener"})
	s.reg.MustRegister(s.refusedConns)

	if s.storeURL, err = cfg.StoreURL(); err != nil {
		return nil, err
	}
	s.configHash = configHash(cfg, s.storeURL)
	if s.tracer, err = tracing.New(tracing.Config{OTLPEndpoint: cfg.OTLPEndpoint, Service: "repool-server", Exporter: opts.SpanExporter}); err != nil {
		return nil, err
	}
	u := s.storeURL
	if cfg.HA {
		u = haSessions(u, cfg.HASessionTimeout)
	}
	storeOpts := store.Options{Clock: opts.Clock, SharedFiles: cfg.StoreSharedFiles, Fsync: cfg.StoreFsync, Log: opts.Log}
	if cfg.HA {
		storeOpts.Group = cfg.Group
	}
	raw, err := u.Open(ctx, storeOpts)
	if err != nil {
		return nil, fmt.Errorf("opening the store: %w", err)
	}
	s.watched = newWatchedStore(raw, s.reg)
	s.store = s.watched
	s.writes = newWriteHealth(s.log, s.clock, s.reg, s.lead.Load, s.syncHealth)
	s.watched.health = s.writes
	// A single server claims the store here, before it writes anything;
	// HA servers share it and take turns through the leader election.
	if s.mode, err = newMode(ctx, s, raw); err != nil {
		return nil, err
	}
	key, err := s.store.SigningKey(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the signing key: %w", err)
	}
	if s.signer, err = token.NewSigner(key, opts.Clock); err != nil {
		return nil, err
	}
	authn, err := auth.New(auth.Config{Store: s.store, Signer: s.signer, TokenTTL: cfg.TokenTTL, Clock: opts.Clock})
	if err != nil {
		return nil, err
	}
	budgets, err := budget.New(budget.Config{
		Resources: cfg.GlobalResources, Cells: cfg.GlobalCells,
		DefaultMaxResources: int64(s.rules.Defaults.Values.Value(limits.MaxResources)),
		DefaultMaxCells:     int64(s.rules.Defaults.Values.Value(limits.MaxCells)),
	})
	if err != nil {
		return nil, err
	}
	limiter, err := ratelimit.New(ratelimit.Config{
		Rate: cfg.Limits.Value(limits.RatePerSecond), Burst: int(cfg.Limits.Value(limits.Burst)), Clock: opts.Clock, Logger: opts.Log, Registerer: s.reg,
	})
	if err != nil {
		return nil, err
	}
	if s.audit, err = audit.New(s.store, 4096, s.reg, opts.Log); err != nil {
		return nil, err
	}
	// The registry's pools are made by the lifecycle, made once the
	// checkpointer that restores into the registry exists.
	s.pools = tenants.NewRegistry(nil)
	if s.journal, err = journal.New(s.store, 5*time.Second, s.reg); err != nil {
		return nil, err
	}
	if s.cp, err = checkpoint.New(checkpoint.Config{
		Store: s.store, Pools: s.pools, Group: storeOpts.Group, Leases: s.store.LoadLeases, Metrics: s.reg, Clock: opts.Clock, Log: opts.Log,
	}); err != nil {
		return nil, err
	}
	if s.retain, err = retention.New(retention.Config{
		Store: s.store, Policy: cfg.Retention(), Group: storeOpts.Group, Clock: s.clock, Metrics: s.reg, Log: opts.Log,
	}); err != nil {
		return nil, err
	}
	lcfg := tenants.LifecycleConfig{
		Pools: s.pools, Store: s.store, Rules: s.rules, Defaults: s.rules.Defaults, Policy: cfg.Policy, Budget: budgets, Limiter: limiter,
		Credentials: authn, Checkpoints: s.cp, Watcher: s.audit,
		Epoch: s.epoch.Load, Clock: s.poolClock, Life: s.life, Log: opts.Log,
	}
	s.mode.lifecycle(&lcfg)
	if s.tenants, err = tenants.NewLifecycle(lcfg); err != nil {
		return nil, err
	}
	calls, err := callbudget.New(callbudget.Config{
		PerTenant: cfg.GRPCMaxCallsPerTenant, Unverified: cfg.GRPCMaxUnverifiedCalls, Hold: cfg.GRPCHandshakeTimeout,
	})
	if err != nil {
		return nil, err
	}
	if s.svc, err = dataplane.New(dataplane.Config{
		Calls: calls,
		Pools: s.pools, Auth: authn, Limiter: limiter, Journal: durability{s},
		Limit: s.tenants.Limit, Active: s.active, Metrics: s.reg, Log: opts.Log,
		StreamIdle: cfg.GRPCMaxStreamIdle,
		Attribute: func(peer net.Addr, tenant string) error {
			if s.grpcFair == nil {
				return nil
			}
			return s.grpcFair.Attribute(peer, tenant)
		},
		Audit: func(tenant, actor, action, detail string) {
			s.audit.Record(store.AuditEntry{TenantID: tenant, Actor: actor, Action: action, Detail: detail})
		},
	}); err != nil {
		return nil, err
	}
	if s.control, err = control.New(control.Config{
		Store: s.store, Limits: s.rules, MaxKeysPerTenant: cfg.MaxKeysPerTenant, Signer: s.signer, Hooks: s.tenants,
		Clock: opts.Clock, Log: opts.Log, Active: s.active, Groups: s.mode.groups(),
		Self: func() string { _, why := s.role(); return why },
	}); err != nil {
		return nil, err
	}
	s.reg.MustRegister(poolCollector{s.pools})

	if err := s.listen(); err != nil {
		return nil, err
	}
	if err := s.mode.start(ctx); err != nil {
		return nil, err
	}
	// Last, once nothing else can fail: a start that fails (a port in use,
	// a store that cannot be restored) must not spend the secrets that the
	// first start shows once.
	if err := s.bootstrap(ctx, opts.Out); err != nil {
		return nil, err
	}
	s.started = s.clock.Now()
	return s, nil
}

// becomeActive restores every tenant under a new epoch, accounts budgets and
// limits, and then, only then, starts serving the data plane. It reopens
// the tenant registry that a step-down closed: restoring creates pools.
func (s *Server) becomeActive(ctx context.Context, epoch uint32) error {
	if epoch > pool.MaxEpoch {
		return fmt.Errorf("epoch %d is above %d, the largest that fencing tokens carry: the store's epoch counter is used up", epoch, pool.MaxEpoch)
	}
	s.epoch.Store(epoch)
	if err := s.tenants.LoadLimits(ctx); err != nil {
		return err
	}
	s.tenants.Open()
	failed, err := s.cp.RestoreAll(ctx)
	if err != nil {
		return fmt.Errorf("restoring pools: %w", err)
	}
	s.mode.activated(ctx)
	s.log.Info("server active", "grpc", s.grpcLn.Addr().String(), "http", s.httpLn.Addr().String(),
		"store", s.storeURL.Redacted(), "epoch", epoch, "restore_failures", failed)
	// A new term starts writable: whatever a standby's store did before
	// the probe and this term's writes find out.
	s.writes.reset()
	s.leaderSince.Store(s.clock.Now().UnixNano())
	s.lead.Store(true)
	s.ready.Store(true)
	s.syncHealth()
	return nil
}

// syncHealth sets the gRPC health service's status from the server's
// state: SERVING while it is ready, active and its store takes its
// writes, NOT_SERVING otherwise. Every change of one of those calls it,
// after the change; the lock makes the last call's view the one that
// stays.
func (s *Server) syncHealth() {
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	if s.health == nil {
		return
	}
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if s.ready.Load() && s.lead.Load() && s.writes.err() == nil {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
}

// haSessions makes the store's sessions of an HA server die with the
// server: a leader paused or cut off inside a fenced transaction holds the
// epoch row, so its successor's epoch bump would wait for it. The database
// ends such a session after timeout, and TCP keepalives notice a vanished
// host. Settings the URL gives itself are kept.
func haSessions(u open.URL, timeout time.Duration) open.URL {
	return u.WithQueryDefaults(map[string]string{
		"idle_in_transaction_session_timeout": strconv.FormatInt(timeout.Milliseconds(), 10),
		"tcp_keepalives_idle":                 strconv.Itoa(max(1, int(timeout.Seconds()/2))),
		"tcp_keepalives_interval":             "1",
		"tcp_keepalives_count":                "2",
	})
}

func (s *Server) active() error {
	if !s.lead.Load() {
		return dataplane.ErrNotActive
	}
	return nil
}

// bootstrap creates the demo tenant on an empty store and prints its key
// and an operator token once, with examples aimed at the bound addresses.
// New calls it after everything else that can fail, the listeners bound.
func (s *Server) bootstrap(ctx context.Context, out io.Writer) error {
	b, created, err := control.Bootstrap(ctx, s.store, s.signer, s.cfg.OperatorTokenTTL)
	if err != nil {
		return fmt.Errorf("first start: %w", err)
	}
	if !created {
		return nil
	}
	limits := "its request limit is the server default"
	if err := s.demoLimits(ctx, b.Tenant.ID); err != nil {
		s.log.Warn("demo tenant: local limits not set; the server defaults apply", "err", err)
	} else {
		limits = fmt.Sprintf("its request limit is %d/s, burst %d: a local loop runs at full speed", DemoRatePerSecond, DemoBurst)
	}
	grpcAddr, httpAddr := s.GRPCAddr(), s.HTTPAddr()
	grpcurlTLS, curlTLS, scheme := "-plaintext", "", "http"
	if s.tls != nil {
		// The CA file is the operator's; the certificate names the server.
		grpcurlTLS, curlTLS, scheme = "-cacert CA.crt", "--cacert CA.crt ", "https"
	}
	fmt.Fprintf(out, `repool: first start on an empty store: created tenant %q (%s;
production tenants get the defaults, see the README).
These secrets are shown once; keep them.
  demo API key:    %s
  operator token:  %s   (expires %s)

Call the data plane (gRPC, reflection on):
  grpcurl %s -H 'x-api-key: %s' -d '{"resources":[{"id":"proxy-1","capacity":2}]}' %s repool.v1.PoolService/Register
  grpcurl %s -H 'x-api-key: %s' -d '{"context":"search","ttl_seconds":30}' %s repool.v1.PoolService/Acquire
Call the control plane (HTTP/JSON):
  curl -s %s-H 'Authorization: Bearer %s' %s://%s/api/v1/tenants
`, b.Tenant.ID, limits, b.Key, b.OperatorToken, b.OperatorTokenExpiresAt.Format(time.RFC3339),
		grpcurlTLS, b.Key, grpcAddr, grpcurlTLS, b.Key, grpcAddr, curlTLS, b.OperatorToken, scheme, httpAddr)
	return nil
}

// The demo tenant's request limit, set on first start: high enough that a
// local loop (acquire, use, release) is never slowed by it, where the
// server default (ratelimit.DefaultRate, DefaultBurst) suits a tenant
// sharing a production server.
const (
	DemoRatePerSecond = 100_000
	DemoBurst         = 10_000
)

// demoLimits gives the demo tenant its local request limit, as an operator
// would through the control plane (stored, audited, applied).
func (s *Server) demoLimits(ctx context.Context, tenant string) error {
	l, err := s.store.GetLimits(ctx, tenant)
	if err != nil {
		return err
	}
	l.Values.Set(limits.RatePerSecond, DemoRatePerSecond)
	l.Values.Set(limits.Burst, DemoBurst)
	if err := s.rules.Check(l); err != nil {
		return err
	}
	if err := s.store.PutLimits(ctx, tenant, l); err != nil {
		return err
	}
	if _, err := s.store.AppendAudit(ctx, store.AuditEntry{TenantID: tenant, Actor: "bootstrap", Action: "limits.put", Target: tenant,
		Detail: fmt.Sprintf("rate_per_second=%d, burst=%d (demo tenant: local limits)", DemoRatePerSecond, DemoBurst)}); err != nil {
		return err
	}
	return s.tenants.ApplyLimits(tenant, l)
}

// listen binds the gRPC and HTTP listeners, each bounded to its
// connections (netlimit), and builds the servers with their deadlines.
func (s *Server) listen() error {
	var err error
	if s.cfg.TLSCert != "" {
		files := s.cfg.TLSFiles()
		files.Clock = s.clock // the certificate files' reload checks
		if s.tls, err = tlsconf.NewServer(files); err != nil {
			return err
		}
		s.reg.MustRegister(s.tls.Collector())
	}
	// The gRPC listener shares its bound among tenants: a connection
	// belongs to the tenant of its first authenticated call (the data
	// plane's Attribute), and one that none claimed within the handshake
	// timeout is closed.
	if s.grpcFair, err = listenLimited(s.cfg.GRPCAddr, s.cfg.GRPCMaxConnections, s.refusedConns.WithLabelValues("grpc"), netlimit.Options{
		PerOwner: s.cfg.GRPCMaxConnectionsPerTenant, Unclaimed: s.cfg.GRPCHandshakeTimeout,
	}); err != nil {
		return fmt.Errorf("gRPC listener: %w", err)
	}
	s.grpcLn = s.grpcFair
	httpLn, err := listenLimited(s.cfg.HTTPAddr, s.cfg.HTTP.MaxConnections, s.refusedConns.WithLabelValues("http"), netlimit.Options{})
	if err != nil {
		s.grpcLn.Close()
		return fmt.Errorf("HTTP listener: %w", err)
	}
	s.httpLn = httpLn // not before: a nil *Listener would make a non-nil net.Listener
	// HAProxy's agent check shares the HTTP port, in plaintext (before
	// TLS), its first bytes bounded like a request's headers.
	s.httpLn = agent.Listen(s.httpLn, s.agentAnswer, s.cfg.HTTP.ReadHeaderTimeout)
	c := s.cfg
	// Stream workers reuse goroutines across calls instead of starting one
	// per call: a call on a new goroutine grows its stack, copying it, on
	// its way to the handler, a tenth of the server's CPU under load. Calls
	// wait for the lease journal, so many run at once; there are workers
	// for as many as one connection's default bound on concurrent calls,
	// and a call that finds every worker busy runs on a new goroutine.
	// Shared write buffers keep idle connections small.
	// Fixed flow-control windows: without them gRPC grows each stream's
	// window (BDP estimation) up to 16 MiB, and a stream whose handler
	// does not read (a Leases stream whose client reads no answer) holds
	// all of it.
	opts := append(append(s.svc.ServerOptions(), s.tracer.ServerOptions()...), grpc.NumStreamWorkers(streamWorkers), grpc.SharedWriteBuffer(true),
		grpc.MaxConcurrentStreams(uint32(c.GRPCMaxConcurrentStreams)),
		grpc.InitialWindowSize(int32(c.GRPCStreamWindow)), grpc.InitialConnWindowSize(int32(c.GRPCConnWindow)),
		grpc.ConnectionTimeout(c.GRPCHandshakeTimeout),
		grpc.MaxHeaderListSize(uint32(c.GRPCMaxHeaderBytes)),
		// A call's request is read whole before it is authenticated: the
		// tap admits each call by the tenant its credential claims (or as
		// unverified) before a byte is read, and the message bound caps
		// what each admitted call can make the server hold.
		grpc.MaxRecvMsgSize(c.GRPCMaxRecvBytes), grpc.InTapHandle(s.svc.Tap),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: c.GRPCMaxConnectionIdle, Time: c.GRPCKeepaliveTime, Timeout: c.GRPCKeepaliveTimeout,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: c.GRPCKeepaliveMinTime, PermitWithoutStream: true}),
	)
	if s.tls != nil {
		// gRPC negotiates h2 by ALPN; the handshake counts against
		// GRPCHandshakeTimeout. The HTTP listener offers h2 and http/1.1,
		// its handshake bounded by the HTTP read deadlines.
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.tls.Config("h2"))))
		s.httpLn = tls.NewListener(s.httpLn, s.tls.Config("h2", "http/1.1"))
	}
	s.grpc = grpc.NewServer(opts...)
	s.svc.Attach(s.grpc)
	s.health = health.NewServer()
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	s.http = c.HTTP.Server(s.httpHandler(), slog.NewLogLogger(s.log.Handler(), slog.LevelWarn))
	return nil
}

// streamWorkers is the gRPC server's stream workers: goroutines that run
// calls one after another (see listen).
const streamWorkers = 256

// listenLimited binds addr and closes, as soon as they are accepted, the
// connections beyond max, counting each in refused.
func listenLimited(addr string, max int, refused prometheus.Counter, opts netlimit.Options) (*netlimit.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	limited, err := netlimit.NewFair(ln, max, refused.Inc, opts)
	if err != nil {
		ln.Close()
		return nil, err
	}
	return limited, nil
}

func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch err := s.writes.err(); {
		case !s.ready.Load():
			http.Error(w, "not ready", http.StatusServiceUnavailable)
		case err != nil:
			// An active server whose store does not take its writes
			// cannot serve: 503 until a probe write succeeds.
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		default:
			_, _ = io.WriteString(w, "ready\n")
		}
	})
	mux.HandleFunc("GET /readyz/active", func(w http.ResponseWriter, _ *http.Request) {
		switch code, why := s.role(); code {
		case http.StatusOK:
			_, _ = io.WriteString(w, why+"\n")
		default:
			http.Error(w, why, code)
		}
	})
	mux.Handle("GET /metrics", s.metricsHandler())
	mux.Handle("GET /status.json", s.control.StatusHandler(func() any { return s.Status() }))
	mux.Handle("/api/v1/", s.control.Handler())
	pages := s.control.StatusPages()
	mux.Handle("/status", pages)
	mux.Handle("/status/", pages)
	return mux
}

// role is what /readyz/active answers, and why: 200 active and ready; 404
// healthy standby (HAProxy marks it NOLB); 503 not ready or broken, its
// store not writable included (DOWN).
func (s *Server) role() (int, string) {
	switch err := s.writes.err(); {
	case !s.ready.Load():
		return http.StatusServiceUnavailable, "not ready"
	case !s.lead.Load():
		return http.StatusNotFound, "standby"
	case err != nil:
		return http.StatusServiceUnavailable, err.Error()
	default:
		return http.StatusOK, "active"
	}
}

// agentAnswer is the answer to HAProxy's agent check on the HTTP port
// (package agent), the same as /readyz/active's.
func (s *Server) agentAnswer() string {
	switch code, why := s.role(); code {
	case http.StatusOK:
		return agent.Active
	case http.StatusNotFound:
		return agent.Standby
	default:
		return agent.Down(why)
	}
}

// tlsWatchInterval is how often the TLS files are checked for changes.
const tlsWatchInterval = time.Second

// ReloadTLS re-reads the TLS certificate, key and client CA. A bad new set
// keeps the one in use, and the error says what is wrong. Without TLS it
// does nothing.
func (s *Server) ReloadTLS() error {
	if s.tls == nil {
		return nil
	}
	err := s.tls.Reload()
	s.logTLS(err)
	return err
}

func (s *Server) logTLS(err error) {
	if err != nil {
		s.log.Error("TLS files not reloaded; the previous certificate stays in use", "err", err)
		return
	}
	s.log.Info("TLS files reloaded", "cert", s.cfg.TLSCert, "not_after", s.tls.NotAfter().UTC().Format(time.RFC3339))
}

// TLS reports whether the listeners serve TLS.
func (s *Server) TLS() bool { return s.tls != nil }

// GRPCAddr and HTTPAddr return the bound addresses (useful with port 0).
func (s *Server) GRPCAddr() string { return s.grpcLn.Addr().String() }

// HTTPAddr returns the bound HTTP address.
func (s *Server) HTTPAddr() string { return s.httpLn.Addr().String() }

// Run serves until ctx ends, then shuts down gracefully: it stops taking
// calls, ends event streams and Leases streams (each between two calls),
// drains in-flight calls (bounded by ShutdownGrace), writes a final
// checkpoint (if active), gives up the leader lock (HA), keeps the HTTP
// port open until stopAnnounce has passed (HA), then drains the HTTP
// server and the gRPC connections (bounded by ShutdownGrace), flushes the
// audit trail and closes the store. In HA mode it
// campaigns for leadership, serves while it leads and steps down when its
// term ends.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 2)
	go func() { errc <- s.grpc.Serve(s.grpcLn) }()
	go func() {
		if err := s.http.Serve(s.httpLn); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	auditDone := make(chan struct{})
	go func() { defer close(auditDone); s.audit.Run(s.life, 5*time.Second) }()
	if s.tls != nil {
		// Certificates rotated in place (a renewal writing new files) are
		// picked up without a signal.
		go s.tls.Watch(s.life, tlsWatchInterval, s.logTLS)
	}

	runErr := s.mode.serve(ctx, errc)
	s.log.Info("shutting down")
	began := s.clock.Now()
	wasActive := s.lead.Load() && !s.lost.Load()
	s.ready.Store(false)
	s.lead.Store(false)
	s.health.Shutdown()
	s.closeStreams(fmt.Errorf("%w: server shutting down", dataplane.ErrNotActive))
	// The calls admitted before the server stopped being active are
	// waited for, not its gRPC connections: grpc-go's GracefulStop also
	// waits for each client to close its side of a connection, up to a
	// second after its last GOAWAY (a proxy that keeps it open held the
	// leader lock that second). The connections close after the hand-over.
	s.drainCalls(context.Background())
	drained := s.clock.Now()
	hctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownGrace)
	defer cancel()
	s.stop()
	s.mode.drained()
	if wasActive {
		if err := s.cp.Round(hctx); err != nil {
			s.log.Error("final checkpoint incomplete", "err", err)
		}
	}
	// Before the gRPC and HTTP servers' drain (an elected server's leader
	// lock: see elected.handOver).
	s.mode.handOver(wasActive, began, drained)
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	if s.cfg.HA {
		announceStop(began.Add(stopAnnounce).Sub(s.clock.Now()))
	}
	_ = s.http.Shutdown(hctx)
	select { // within the same grace as the checkpoint and the HTTP drain
	case <-stopped:
	case <-hctx.Done():
		s.grpc.Stop()
	}
	<-auditDone
	if err := s.tracer.Shutdown(hctx); err != nil {
		s.log.Warn("exporting the last spans", "err", err)
	}
	if err := s.store.Close(); err != nil && runErr == nil {
		runErr = err
	}
	s.mode.release()
	return runErr
}

// drainCalls waits, up to ShutdownGrace, for the data-plane calls admitted
// before the server stopped being active (a stop, a switchover); the ones
// still running after it are left to the fence and to the gRPC server's
// stop.
func (s *Server) drainCalls(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ShutdownGrace)
	defer cancel()
	if err := s.svc.Drain(ctx); err != nil {
		s.log.Warn("calls still in progress after the shutdown grace; handing over without them", "grace", s.cfg.ShutdownGrace)
	}
}

// stopAnnounce is how long, from the start of its shutdown, an HA server
// keeps its HTTP port open, answering its health checks "not ready" and
// HAProxy's agent "down", before the port closes. HAProxy marks a server
// DOWN at the first agent answer "down", but only after checks.fall
// refused connections once the port is closed (3 × 100 ms with the
// inventory's defaults): a standby that stops in a few milliseconds would
// otherwise stay alive to the front end (NOLB) for that long, and when
// every server of a group stops, the front end's cluster-down answer
// would wait for it. Ten agent intervals of the inventory's default
// checks.agent_inter (25 ms); two and a half of its checks.inter (100 ms),
// for an inventory that asks the agent no more often than it checks.
const stopAnnounce = 250 * time.Millisecond

// announceStop waits for wait of real time: the observer is HAProxy, not
// anything on the server's clock.
func announceStop(wait time.Duration) {
	if wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	<-t.C
}

// activeLoops starts what the active server runs in the background — the
// report flush (the pools' changes written every ReportFlush), the lease
// journal's compaction every CheckpointInterval, the expiry tick, the
// store's probe write every StoreProbeInterval (writeHealth) and the
// retention rounds every RetentionInterval — and returns a function that
// stops them and waits.
func (s *Server) activeLoops(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { s.cp.Run(ctx, s.cfg.ReportFlush) })
	wg.Go(func() { s.compact(ctx) })
	wg.Go(func() { s.tick(ctx) })
	wg.Go(func() { s.writes.run(ctx, s.cfg.StoreProbeInterval, s.watched.ProbeWrite) })
	wg.Go(func() { s.retain.Run(ctx, s.cfg.RetentionInterval) })
	s.mode.loops(ctx, &wg)
	return func() { cancel(); wg.Wait() }
}

// compact removes journaled leases that expired a while ago, every
// CheckpointInterval. A restore drops expired leases anyway; pruning keeps
// the journal as small as the leases outstanding.
func (s *Server) compact(ctx context.Context) {
	clock.Every(ctx, s.clock, s.cfg.CheckpointInterval, func(ctx context.Context) bool {
		if err := s.store.PruneLeases(ctx, s.clock.Now().Add(-time.Minute).UnixNano()); err != nil && ctx.Err() == nil {
			s.log.Warn("pruning the lease journal", "err", err)
		}
		return true
	})
}

func (s *Server) closeStreams(why error) {
	s.pools.Each(func(_ string, p *pool.Pool) { p.CloseSubscriptions(why) })
	s.svc.EndLeases(why)
}

// tick expires leases and ends cooldowns every second, so that expiry
// events are timely in idle pools.
func (s *Server) tick(ctx context.Context) {
	clock.Every(ctx, s.clock, time.Second, func(context.Context) bool {
		s.pools.Each(func(_ string, p *pool.Pool) { p.Tick() })
		return true
	})
}

// Retain runs one retention round now (for tests and operators): it
// prunes what the retention settings give up and refreshes the store's
// size gauges.
func (s *Server) Retain(ctx context.Context) (retention.Result, error) { return s.retain.Round(ctx) }

// Checkpoint runs one checkpoint round now (for tests and operators).
func (s *Server) Checkpoint(ctx context.Context) error { return s.cp.Round(ctx) }
