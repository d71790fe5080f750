// Package callbudget bounds the gRPC calls whose requests the server reads
// before it has authenticated them. gRPC reads a call's whole request (up
// to the server's message bound) before any interceptor runs, and
// authentication may need the store, which cannot be asked from the
// transport's tap (it runs under the connection's lock). So each new call
// is admitted by what can be known in memory: the tenant its credential
// claims, checked without the store (a token's signature, a key already
// seen), or no tenant ("unverified": a key never seen, or a call outside
// the data plane such as a health check). Each tenant may have Config.PerTenant
// calls in flight and all unverified callers together Config.Unverified;
// an unverified call that is not authenticated within Config.Hold is
// ended. The memory such requests hold is at most the call counts times
// the message bound.
package callbudget

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrFull is wrapped by Admit's refusal: the claimed tenant, or the
// unverified callers together, have as many calls in flight as they may.
var ErrFull = errors.New("too many calls in flight")

// Config sizes a Budget.
type Config struct {
	// PerTenant bounds the calls in flight of one tenant. At least 1.
	PerTenant int
	// Unverified bounds the calls in flight whose credential could not be
	// checked in memory, across every connection. At least 1.
	Unverified int
	// Hold is how long an unverified call may stay unauthenticated before
	// it is ended. At least 1 ns.
	Hold time.Duration
}

// Budget counts calls in flight by claimed tenant. Safe for concurrent use.
type Budget struct {
	cfg        Config
	mu         sync.Mutex
	tenants    map[string]int
	unverified int
}

// New returns a Budget, or an error naming the field out of range.
func New(cfg Config) (*Budget, error) {
	switch {
	case cfg.PerTenant < 1:
		return nil, fmt.Errorf("callbudget: PerTenant %d: want at least 1", cfg.PerTenant)
	case cfg.Unverified < 1:
		return nil, fmt.Errorf("callbudget: Unverified %d: want at least 1", cfg.Unverified)
	case cfg.Hold <= 0:
		return nil, fmt.Errorf("callbudget: Hold %v: want more than 0", cfg.Hold)
	}
	return &Budget{cfg: cfg, tenants: map[string]int{}}, nil
}

// Hold returns how long an unverified call may stay unauthenticated.
func (b *Budget) Hold() time.Duration { return b.cfg.Hold }

// Slot is one admitted call. Release gives it back; Authenticated moves an
// unverified slot to the tenant its call authenticated as.
type Slot struct {
	b      *Budget
	mu     sync.Mutex
	tenant string // "" while unverified
	done   bool
	authed bool
}

// Admit admits a call claiming tenant ("" for unverified), or refuses it
// with an error wrapping ErrFull that says whose calls are too many.
func (b *Budget) Admit(tenant string) (*Slot, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if tenant == "" {
		if b.unverified >= b.cfg.Unverified {
			return nil, fmt.Errorf("%w: %d calls whose credential this server has not checked yet are in flight, the most it reads at once; retry in a moment", ErrFull, b.unverified)
		}
		b.unverified++
		return &Slot{b: b}, nil
	}
	if n := b.tenants[tenant]; n >= b.cfg.PerTenant {
		return nil, fmt.Errorf("%w: tenant %q has %d calls in flight on this server, its limit (--grpc-max-calls-per-tenant); wait for answers before sending more", ErrFull, tenant, n)
	}
	b.tenants[tenant]++
	return &Slot{b: b, tenant: tenant, authed: true}, nil
}

// InFlight returns the calls in flight of tenant ("" for unverified).
func (b *Budget) InFlight(tenant string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if tenant == "" {
		return b.unverified
	}
	return b.tenants[tenant]
}

// Authenticated records that the slot's call authenticated as tenant: an
// unverified slot is counted as the tenant's from now on (even past its
// limit: the request is read already), and the slot is no longer ended by
// Hold. A verified slot is unchanged.
func (s *Slot) Authenticated(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done || s.authed {
		return
	}
	s.authed = true
	s.b.mu.Lock()
	s.b.unverified--
	s.b.tenants[tenant]++
	s.b.mu.Unlock()
	s.tenant = tenant
}

// Expired reports whether the slot is still unverified, so that its call,
// past Hold, is to be ended.
func (s *Slot) Expired() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.done && !s.authed
}

// Release gives the slot back; a second call does nothing.
func (s *Slot) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return
	}
	s.done = true
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if s.tenant == "" {
		s.b.unverified--
		return
	}
	if s.b.tenants[s.tenant]--; s.b.tenants[s.tenant] == 0 {
		delete(s.b.tenants, s.tenant)
	}
}
