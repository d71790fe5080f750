package sidecar

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/sidecar/config"
	"github.com/repool/repool/internal/sidecar/httpapi"
	"github.com/repool/repool/internal/sidecar/leases"
	"github.com/repool/repool/internal/sidecar/provider"
	"github.com/repool/repool/internal/sidecar/resilience"
	"github.com/repool/repool/internal/sidecar/token"
)

// providerSet is the providers in effect, by name. A set is never modified
// once published; Apply publishes a new one.
type providerSet map[string]*entry

// entry is one provider with the parts a reload may keep.
type entry struct {
	cfg   config.Provider
	prov  *provider.Provider
	up    *upstream
	guard *resilience.Guard
}

// upstream is a provider's connection and token source. It is shared by
// the successive configurations that keep the provider's endpoint, API
// key, token policy and Redis settings, and closed once it is retired and
// the last request using it is done.
type upstream struct {
	key   upstreamKey // what it is built from: a reload keeps it if equal
	conn  *grpc.ClientConn
	conns *conns // conn's TCP connections, which a silent provider's drop ends
	// onReady is told each time conn becomes READY after it was not: the
	// breaker in effect for it (Breaker.Reconnected).
	onReady atomic.Pointer[func()]
	// connected is set once conn has been READY: a channel never used
	// stays lazy (IDLE) until its first call.
	connected atomic.Bool
	tokens    *token.Source
	leases    *leases.Client // the Leases streams on conn

	mu      sync.Mutex
	refs    int
	retired bool
	gone    chan struct{} // closed on retire
	closed  chan struct{} // closed once conn and tokens are closed
}

// acquire counts a request in, unless the upstream is retired.
func (u *upstream) acquire() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.retired {
		return false
	}
	u.refs++
	return true
}

// release counts a request out and closes a retired upstream after its
// last request.
func (u *upstream) release() {
	u.mu.Lock()
	u.refs--
	last := u.retired && u.refs == 0
	u.mu.Unlock()
	if last {
		u.close()
	}
}

// retire stops new requests; the upstream closes once in-flight ones are
// done (at once if there are none).
func (u *upstream) retire() {
	u.mu.Lock()
	if u.retired {
		u.mu.Unlock()
		return
	}
	u.retired = true
	close(u.gone)
	idle := u.refs == 0
	u.mu.Unlock()
	if idle {
		u.close()
	}
}

func (u *upstream) close() {
	if u.leases != nil {
		u.leases.Close()
	}
	u.tokens.Close()
	u.conn.Close()
	close(u.closed)
}

// wait returns once the upstream is closed.
func (u *upstream) wait() { <-u.closed }

// upstreamKey is what an upstream is built from: a provider's name,
// endpoint, API key, token policy and lease streams, and the Redis
// settings (the zero value without Redis; with its defaults, a Redis is
// never zero).
type upstreamKey struct {
	name, endpoint, apiKey string
	tls                    config.TLS // with the files' contents: a rotation reconnects
	token                  token.Policy
	redis                  token.Redis
	leaseStreams           int
}

func newUpstreamKey(name string, p config.Provider, r *config.Redis) upstreamKey {
	k := upstreamKey{name: name, endpoint: p.Endpoint, apiKey: p.APIKey, tls: p.TLS, token: p.Token, leaseStreams: p.LeaseStreams}
	if r != nil {
		k.redis = r.Redis
	}
	return k
}

// dial builds the upstream k describes. The connection is lazy: nothing is
// dialled until the first call.
func (s *Sidecar) dial(k upstreamKey) (*upstream, error) {
	creds := insecure.NewCredentials() // h2c to the VIP: loopback, or insecure: true
	if k.tls.On() {
		cfg, err := k.tls.Client().Config("provider " + k.name)
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(cfg) // h2 by ALPN; the certificate verified
	}
	cs := newConns()
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		// Our retrier is the only retry layer.
		grpc.WithDisableRetry(),
		// Reconnect quickly once the VIP answers again: while it moves
		// (0.15 s when HAProxy stops on its holder, 0.9 s when the holder's
		// link is cut) every attempt fails, and a backoff grown past a
		// fifth of a second would keep the connection down that much
		// longer after the VIP has arrived (grpc-go's default grows to
		// 120 s). While no call is made (an open breaker) watchReady
		// redials every reconnectPace instead: up to 20 SYNs a second to
		// a VIP that refuses, per sidecar. A whole attempt, TLS included, is given up after half a
		// second; its SYN, unanswered, after synTimeout (dialer), so that
		// the next attempt reaches the new holder once the VIP has moved.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: 500 * time.Millisecond,
		}),
		// A connection to a host gone without a reset ends within a
		// second (dialer), or at once when the breaker's silence rule
		// trips (conns.drop).
		grpc.WithContextDialer(cs.dial),
	}, s.dialOpt...)
	conn, err := grpc.NewClient(k.endpoint, opts...)
	if err != nil {
		return nil, fmt.Errorf("provider %q: endpoint %q: %w", k.name, k.endpoint, err)
	}
	var redis *token.Redis
	if k.redis != (token.Redis{}) {
		redis = &k.redis
	}
	tokens, err := token.New(token.Config{
		Provider: k.name, APIKey: k.apiKey, Issuer: repoolv1.NewAuthServiceClient(conn), Policy: k.token,
		Redis: redis, Clock: s.clock, Log: s.log, Metrics: s.tokMetrics,
	})
	if err != nil {
		conn.Close()
		return nil, err
	}
	var streams *leases.Client
	if k.leaseStreams >= 0 {
		streams = leases.New(repoolv1.NewPoolServiceClient(conn), k.leaseStreams)
	}
	u := &upstream{key: k, conn: conn, conns: cs, tokens: tokens, leases: streams,
		gone: make(chan struct{}), closed: make(chan struct{})}
	go u.watchReady()
	return u, nil
}

// watchReady keeps the connection up and calls onReady each time it
// becomes READY after it was not, until the connection is closed. grpc
// reconnects a channel only for a call, and while the breaker is open no
// call is made: so a lost connection is dialled again at once (IDLE), and
// a failed dial again every reconnectPace (TRANSIENT_FAILURE), and the
// breaker learns the moment the provider's front end answers again (the
// VIP has moved to the other LB host, or its HAProxy is back).
func (u *upstream) watchReady() {
	st := u.conn.GetState()
	for st != connectivity.Shutdown {
		switch st {
		case connectivity.Idle:
			if u.connected.Load() { // lost: not before the first call
				u.conn.Connect()
			}
		case connectivity.TransientFailure:
			ctx, cancel := context.WithTimeout(context.Background(), reconnectPace)
			changed := u.conn.WaitForStateChange(ctx, st)
			cancel()
			if !changed {
				u.conn.ResetConnectBackoff()
				continue
			}
			st = u.now(st)
			continue
		}
		if !u.conn.WaitForStateChange(context.Background(), st) {
			return
		}
		st = u.now(st)
	}
}

// now reads the connection's state after a change from prev, and calls
// onReady if it has become READY.
func (u *upstream) now(prev connectivity.State) connectivity.State {
	st := u.conn.GetState()
	if st == connectivity.Ready && prev != connectivity.Ready {
		u.connected.Store(true)
		if f := u.onReady.Load(); f != nil {
			(*f)()
		}
	}
	return st
}

// reconnectPace is how often a connection that failed to connect is
// dialled again while no call is made.
const reconnectPace = 50 * time.Millisecond

// Apply validates cfg and makes it the configuration in effect. Providers
// that are new are built, removed ones retired (their in-flight calls
// finish on the old connection, then it closes), and changed ones rebuilt
// keeping what did not change: the connection and tokens if the endpoint,
// key, token policy and Redis settings are the same, the breaker (and its
// state) and the retry budget if their policies are too. A request holds
// the provider it started with until it ends. Settings of the listener and
// its HTTP server (see restartOnly) and log_level take effect at the next
// start.
//
// An invalid cfg changes nothing.
func (s *Sidecar) Apply(cfg config.Config) error {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping.Err() != nil {
		return fmt.Errorf("sidecar: shutting down")
	}
	old := *s.set.Load()
	next := make(providerSet, len(cfg.Providers))
	var built []*upstream
	fail := func(err error) error {
		for _, u := range built {
			u.retire()
		}
		return err
	}
	var added, changed, removed []string
	for _, name := range cfg.Names() {
		pc := cfg.Providers[name]
		oe := old[name]
		switch {
		case oe == nil:
			added = append(added, name)
		case oe.cfg != pc:
			changed = append(changed, name)
		}
		e := &entry{cfg: pc}
		if k := newUpstreamKey(name, pc, cfg.Redis); oe != nil && oe.up.key == k {
			e.up = oe.up
		} else {
			u, err := s.dial(k)
			if err != nil {
				return fail(err)
			}
			built = append(built, u)
			e.up = u
		}
		var prev *resilience.Guard
		if oe != nil && oe.up == e.up {
			prev = oe.guard // keeps what a policy change leaves alone
		}
		conn, conns, health := e.up.conn, e.up.conns, healthpb.NewHealthClient(e.up.conn)
		e.guard = resilience.NewGuard(resilience.GuardConfig{
			Provider: name, Policy: pc.Resilience(), Clock: s.guards, Metrics: s.resMetrics, Notify: s.transitions,
			Probe:     func(ctx context.Context) error { return provider.Probe(ctx, conn, health) },
			OnSilence: func() { conns.drop() }}, prev)
		prov, err := provider.New(provider.Config{
			Name: name, Timeout: pc.Timeout, Pool: repoolv1.NewPoolServiceClient(e.up.conn), Tokens: e.up.tokens, Leases: e.up.leases,
			Health:  health,
			Breaker: e.guard.Breaker, Retrier: e.guard.Retrier, Bulkhead: e.guard.Bulkhead, Metrics: s.provMetrics,
		})
		if err != nil {
			return fail(err)
		}
		e.prov = prov
		next[name] = e
	}
	var retire []*upstream
	for name, oe := range old {
		ne := next[name]
		if ne == nil {
			removed = append(removed, name)
			s.resMetrics.Forget(name)
			s.tokMetrics.Forget(name)
			s.provMetrics.Forget(name)
		}
		if ne == nil || ne.up != oe.up {
			retire = append(retire, oe.up)
		}
	}
	slices.Sort(removed)
	if len(old) > 0 {
		s.warnRestartOnly(cfg)
	}
	if unused := cfg.Unused(); len(unused) > 0 {
		s.log.Warn("policies that no provider uses", "policies", unused)
	}
	s.set.Store(&next)
	s.cfg = cfg
	for _, e := range next { // each connection tells the breaker now in effect
		reconnected := e.guard.Breaker.Reconnected
		e.up.onReady.Store(&reconnected)
	}
	for _, u := range retire { // after the new set is published
		u.retire()
	}
	if len(old) > 0 {
		s.log.Info("configuration applied", "added", added, "changed", changed, "removed", removed)
	}
	return nil
}

// warnRestartOnly logs settings that a reload cannot change. The caller
// holds s.mu.
func (s *Sidecar) warnRestartOnly(cfg config.Config) {
	if !reflect.DeepEqual(restartOnly(s.cfg), restartOnly(cfg)) {
		s.log.Warn("changes of listen, allow_remote, unix_socket_group, allowed_hosts, allowed_origins, max_body_bytes, " +
			"max_header_bytes, the timeouts, max_connections and log_level take effect at the next start")
	}
}

// restartOnly keeps of c the settings that a reload cannot change: those
// of the listener, the HTTP server and the logger.
func restartOnly(c config.Config) config.Config {
	return config.Config{
		Listen: c.Listen, AllowRemote: c.AllowRemote, UnixSocketGroup: c.UnixSocketGroup,
		AllowedHosts: c.AllowedHosts, AllowedOrigins: c.AllowedOrigins,
		MaxBodyBytes: c.MaxBodyBytes, HTTP: c.HTTP, LogLevel: c.LogLevel,
	}
}

// lookup gives the HTTP API the providers in effect.
type lookup struct{ s *Sidecar }

var _ httpapi.Providers = lookup{}

// Lookup returns the named provider, holding its upstream open until
// Release.
func (l lookup) Lookup(name string) (httpapi.Handle, bool) {
	for range 2 { // a reload may retire the upstream between load and acquire
		e, ok := (*l.s.set.Load())[name]
		if !ok {
			return httpapi.Handle{}, false
		}
		if e.up.acquire() {
			var once sync.Once
			return httpapi.Handle{Provider: e.prov, Release: func() { once.Do(e.up.release) }, Retired: e.up.gone}, true
		}
	}
	return httpapi.Handle{}, false
}

// All returns every provider in effect.
func (l lookup) All() []*provider.Provider {
	set := *l.s.set.Load()
	out := make([]*provider.Provider, 0, len(set))
	for _, e := range set {
		out = append(out, e.prov)
	}
	return out
}

// Names returns the names of the providers in effect, sorted.
func (l lookup) Names() []string {
	set := *l.s.set.Load()
	names := make([]string, 0, len(set))
	for name := range set {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
