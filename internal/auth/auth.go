package auth

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/token"
)

// Errors returned by the Authenticator.
var (
	// ErrUnauthenticated: missing, malformed, wrong or revoked key; bad,
	// expired or foreign token. Deliberately one error.
	ErrUnauthenticated = errors.New("missing or invalid credentials")
	// ErrSuspended: the credential is valid but its tenant is suspended.
	ErrSuspended = errors.New("tenant is suspended")
	// ErrUnavailable: the key store could not be reached.
	ErrUnavailable = errors.New("credential store unavailable")
)

// KeyStore is what the Authenticator needs from the store.
type KeyStore interface {
	LookupKey(ctx context.Context, digest []byte) (store.Key, store.Tenant, error)
	GetKey(ctx context.Context, tenantID, keyID string) (store.Key, error)
	GetTenant(ctx context.Context, id string) (store.Tenant, error)
}

// Config configures an Authenticator.
type Config struct {
	// Store holds keys and tenants. Required.
	Store KeyStore
	// Signer signs and verifies tokens. Required.
	Signer *token.Signer
	// TokenTTL is the lifetime of issued tokens. Default 15m.
	TokenTTL time.Duration
	// CacheTTL bounds how long a key lookup is reused. Revocation, suspension
	// and deletion through this server take effect at once (Invalidate); the
	// TTL bounds the delay for changes made through another server sharing
	// the store. Default 2s; negative disables the cache.
	CacheTTL time.Duration
	// Clock tells the time. Default the wall clock.
	Clock clock.Clock
	// MaxVerified bounds the verified data-plane tokens kept, so that a
	// token seen again is not verified again (an HMAC and a JSON parse,
	// about 7 µs and 64 allocations, on every call behind a sidecar).
	// Default 4096; negative verifies every call.
	MaxVerified int
}

// Authenticator resolves credentials to principals. Safe for concurrent use.
type Authenticator struct {
	cfg Config

	mu       sync.Mutex
	byDigest map[string]cached // string(digest) → lookup
	byKeyID  map[string]cached // key id → lookup (for tokens)
	// known maps the digest of every key that authenticated, for as long
	// as its tenant is not invalidated, to its tenant: what Claim answers
	// without the store. Bounded by the keys that exist.
	known    map[string]string
	gen      uint64                  // bumped by Invalidate: a lookup begun before is not cached
	verified map[string]token.Claims // a token exactly as sent → its claims, until their expiry
}

type cached struct {
	key    store.Key
	tenant store.Tenant
	at     time.Time
}

// New returns an Authenticator, or an error naming the missing field.
func New(cfg Config) (*Authenticator, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("auth: Config.Store is nil")
	case cfg.Signer == nil:
		return nil, errors.New("auth: Config.Signer is nil")
	}
	if cfg.TokenTTL == 0 {
		cfg.TokenTTL = 15 * time.Minute
	}
	if cfg.CacheTTL == 0 {
		cfg.CacheTTL = 2 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.MaxVerified == 0 {
		cfg.MaxVerified = 4096
	}
	return &Authenticator{cfg: cfg, byDigest: map[string]cached{}, byKeyID: map[string]cached{}, known: map[string]string{},
		verified: map[string]token.Claims{}}, nil
}

// storeErr turns a store error into ErrUnauthenticated (no such key), the
// caller's own deadline or cancellation (returned as is), or ErrUnavailable
// (anything else: the store did not answer).
func storeErr(err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return ErrUnauthenticated
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return err
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

func (a *Authenticator) fresh(c cached, ok bool) bool {
	return ok && a.cfg.CacheTTL > 0 && a.cfg.Clock.Now().Sub(c.at) < a.cfg.CacheTTL
}

func (a *Authenticator) admit(c cached) (Principal, error) {
	switch {
	case c.key.Revoked() || c.tenant.Status == store.StatusDeleted:
		return Principal{}, ErrUnauthenticated
	case c.tenant.Status == store.StatusSuspended:
		return Principal{}, ErrSuspended
	}
	return Principal{Tenant: c.tenant.ID, KeyID: c.key.ID}, nil
}

// APIKey authenticates a plain API key.
func (a *Authenticator) APIKey(ctx context.Context, plain string) (Principal, error) {
	if !strings.HasPrefix(plain, KeyPrefix) || len(plain) > 128 {
		return Principal{}, ErrUnauthenticated
	}
	digest := Digest(plain)
	a.mu.Lock()
	c, ok := a.byDigest[string(digest)]
	gen := a.gen
	a.mu.Unlock()
	if !a.fresh(c, ok) {
		k, t, err := a.cfg.Store.LookupKey(ctx, digest)
		if err != nil {
			return Principal{}, storeErr(err)
		}
		c = cached{key: k, tenant: t, at: a.cfg.Clock.Now()}
		a.mu.Lock()
		if a.gen == gen {
			a.byDigest[string(digest)] = c
			a.byKeyID[k.ID] = c
		}
		a.mu.Unlock()
	}
	if subtle.ConstantTimeCompare(c.key.Digest, digest) != 1 {
		return Principal{}, ErrUnauthenticated
	}
	p, err := a.admit(c)
	if err == nil {
		a.mu.Lock()
		if a.gen == gen {
			a.known[string(digest)] = p.Tenant
		}
		a.mu.Unlock()
	}
	return p, err
}

// Verdict is what Claim could tell of a credential without the store.
type Verdict int

// Claim's verdicts.
const (
	// Invalid: no credential, a malformed key, or a token whose
	// signature, expiry or audience does not check out; APIKey or Bearer
	// would refuse it too.
	Invalid Verdict = iota
	// Unknown: a well-formed key this Authenticator has not seen
	// authenticate; only the store can tell.
	Unknown
	// Claimed: a valid token's tenant, or the tenant of a key that
	// authenticated before (and whose tenant was not invalidated since).
	Claimed
)

// Claim sorts a call's credential (its x-api-key, or its bearer token)
// without the store, as cheap first sorting of calls; APIKey and Bearer
// still decide. tenant is set for Claimed.
func (a *Authenticator) Claim(apiKey, bearer string) (tenant string, v Verdict) {
	switch {
	case apiKey != "":
		if !strings.HasPrefix(apiKey, KeyPrefix) || len(apiKey) > 128 {
			return "", Invalid
		}
		digest := Digest(apiKey)
		a.mu.Lock()
		tenant, ok := a.known[string(digest)]
		a.mu.Unlock()
		if !ok {
			return "", Unknown
		}
		return tenant, Claimed
	case bearer != "":
		claims, err := a.verify(bearer) // kept: the interceptor's Bearer then only looks it up
		if err != nil {
			return "", Invalid
		}
		return claims.Tenant, Claimed
	}
	return "", Invalid
}

// Bearer authenticates a data-plane token; the key it was issued from must
// still be valid. A token is verified once and its claims kept until they
// expire (at most MaxVerified tokens): the same token, byte for byte, is
// then only looked up. Whether its key is revoked or its tenant suspended
// is asked on every call all the same, of the key cache that Invalidate
// empties, so a cached token is refused as soon as a fresh one would be.
func (a *Authenticator) Bearer(ctx context.Context, tok string) (Principal, error) {
	claims, err := a.verify(tok)
	if err != nil {
		return Principal{}, ErrUnauthenticated
	}
	return a.admitClaims(ctx, claims)
}

// Verified is a data-plane token whose signature ClaimBearer checked: what
// a gRPC tap hands on to the call's authentication, so that the call's
// token is verified (or looked up among the verified) once.
type Verified struct {
	claims token.Claims
}

// Tenant is the tenant the token claims.
func (v Verified) Tenant() string { return v.claims.Tenant }

// ClaimBearer verifies a data-plane token (from the cache of verified
// tokens when it was seen before), as Bearer does, without asking whether
// its key is still valid: BearerVerified does that for the call.
func (a *Authenticator) ClaimBearer(tok string) (Verified, bool) {
	claims, err := a.verify(tok)
	if err != nil {
		return Verified{}, false
	}
	return Verified{claims: claims}, true
}

// BearerVerified authenticates a call whose token ClaimBearer verified:
// Bearer without the verification. The token's expiry (on the signer's
// clock) and its key's revocation and tenant's suspension are checked on
// every call, as Bearer checks them, so a token held by a long call (a
// Leases stream) is refused from the call after it expires or its key is
// revoked.
func (a *Authenticator) BearerVerified(ctx context.Context, v Verified) (Principal, error) {
	if v.claims.Tenant == "" || !a.cfg.Signer.Now().Before(v.claims.ExpiresAt) {
		return Principal{}, ErrUnauthenticated
	}
	return a.admitClaims(ctx, v.claims)
}

// admitClaims is Bearer's check of a verified token's key and tenant: of
// the key cache (one lock), or of the store when the cache has no fresh
// entry.
func (a *Authenticator) admitClaims(ctx context.Context, claims token.Claims) (Principal, error) {
	a.mu.Lock()
	c, ok := a.byKeyID[claims.KeyID]
	gen := a.gen
	a.mu.Unlock()
	if !a.fresh(c, ok) {
		k, err := a.cfg.Store.GetKey(ctx, claims.Tenant, claims.KeyID)
		if err != nil {
			return Principal{}, storeErr(err)
		}
		t, err := a.cfg.Store.GetTenant(ctx, claims.Tenant)
		if err != nil {
			return Principal{}, storeErr(err)
		}
		c = cached{key: k, tenant: t, at: a.cfg.Clock.Now()}
		a.mu.Lock()
		if a.gen == gen {
			a.byKeyID[k.ID] = c
		}
		a.mu.Unlock()
	}
	if c.tenant.ID != claims.Tenant {
		return Principal{}, ErrUnauthenticated
	}
	return a.admit(c)
}

// verify returns the claims of a valid data-plane token: from the cache of
// verified tokens while they have not expired (on the signer's clock, as
// Verify judges them), or verified and then kept. A full cache is emptied
// before it takes one more: the sidecars of a server's tenants hold a
// token each (a new one every TTL), far fewer than MaxVerified, so only a
// flood of distinct valid tokens, each of which had to be issued for a
// valid key, empties it.
func (a *Authenticator) verify(tok string) (token.Claims, error) {
	if a.cfg.MaxVerified > 0 {
		a.mu.Lock()
		claims, ok := a.verified[tok]
		a.mu.Unlock()
		if ok {
			if a.cfg.Signer.Now().Before(claims.ExpiresAt) {
				return claims, nil
			}
			a.mu.Lock()
			delete(a.verified, tok)
			a.mu.Unlock()
			return token.Claims{}, ErrUnauthenticated
		}
	}
	claims, err := a.cfg.Signer.Verify(tok, token.AudienceData)
	if err != nil || claims.Tenant == "" || claims.KeyID == "" {
		return token.Claims{}, ErrUnauthenticated
	}
	if a.cfg.MaxVerified > 0 {
		a.mu.Lock()
		if len(a.verified) >= a.cfg.MaxVerified {
			clear(a.verified)
		}
		a.verified[tok] = claims
		a.mu.Unlock()
	}
	return claims, nil
}

// IssueToken returns a data-plane token for p and its expiry.
func (a *Authenticator) IssueToken(p Principal) (string, time.Time, error) {
	exp := a.cfg.Clock.Now().Add(a.cfg.TokenTTL).Truncate(time.Second)
	tok, err := a.cfg.Signer.Sign(token.Claims{Audience: token.AudienceData, Tenant: p.Tenant, KeyID: p.KeyID, ExpiresAt: exp})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("auth: signing a token: %w", err)
	}
	return tok, exp, nil
}

// Invalidate forgets every cached lookup of the tenant, so that a revoked
// key, a suspension or a deletion takes effect for the next call.
func (a *Authenticator) Invalidate(tenant string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.gen++ // a lookup in flight read the store before the change
	for d, c := range a.byDigest {
		if c.tenant.ID == tenant {
			delete(a.byDigest, d)
		}
	}
	for d, t := range a.known {
		if t == tenant {
			delete(a.known, d)
		}
	}
	for id, c := range a.byKeyID {
		if c.tenant.ID == tenant {
			delete(a.byKeyID, id)
		}
	}
	for tok, c := range a.verified {
		if c.Tenant == tenant {
			delete(a.verified, tok)
		}
	}
}
