// Package auth authenticates data-plane callers: it makes and hashes API
// keys, resolves an `x-api-key` or a bearer token to the tenant and key it
// belongs to, and issues the short-lived tokens of AuthService.IssueToken.
//
// The tenant of a call comes only from its credential; handlers read it with
// FromContext. Every credential failure is the same ErrUnauthenticated, so a
// caller cannot tell a wrong key from a revoked one; a store outage is
// ErrUnavailable, never disguised as bad credentials; a suspended tenant is
// ErrSuspended.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
)

// KeyPrefix starts every API key, so that leaked keys are easy to spot.
const KeyPrefix = "rpk_"

// displayPrefixLen is how much of a key is kept, in the clear, for display.
const displayPrefixLen = len(KeyPrefix) + 8

// NewKey returns a new API key: KeyPrefix and 32 random bytes from r
// (crypto/rand when nil) in base64url; its non-secret display prefix; and
// its SHA-256 digest, the only form that is stored.
func NewKey(r io.Reader) (plain, prefix string, digest []byte, err error) {
	if r == nil {
		r = rand.Reader
	}
	var b [32]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", "", nil, fmt.Errorf("auth: generating a key: %w", err)
	}
	plain = KeyPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return plain, plain[:displayPrefixLen], Digest(plain), nil
}

// Digest returns the SHA-256 of a plain key.
func Digest(plain string) []byte {
	d := sha256.Sum256([]byte(plain))
	return d[:]
}

// Principal is who a call acts for.
type Principal struct {
	Tenant string
	KeyID  string
}

type principalKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal that authentication put on ctx. A
// handler that finds none has been wired without authentication: it must
// fail the call, never fall back to a default tenant.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok && p.Tenant != ""
}
