// Package token signs and verifies repool's bearer tokens: short-lived
// data-plane tokens issued for an API key, and control-plane tokens that
// carry a role. Both are HS256 JWTs signed with the server's key from the
// store, so every server on the same store accepts them.
package token

import (
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/repool/repool/internal/clock"
)

// Audiences keep the two kinds of token apart: a data-plane token is never a
// control-plane token and the other way round.
const (
	AudienceData    = "repool-data"
	AudienceControl = "repool-control"
)

// ErrInvalid is returned for any token that does not verify: malformed,
// wrongly signed, signed with another method, expired, or for another
// audience. Callers must not tell these apart to clients.
var ErrInvalid = errors.New("invalid token")

// Claims are what a token says.
type Claims struct {
	// Audience is AudienceData or AudienceControl.
	Audience string
	// Tenant is the tenant the token acts for; empty for an operator.
	Tenant string
	// KeyID is the API key a data-plane token was issued from.
	KeyID string
	// Role is the control-plane role (operator, tenant-admin, tenant-viewer).
	Role string
	// ExpiresAt is when the token stops being accepted.
	ExpiresAt time.Time
}

type jwtClaims struct {
	Tenant string `json:"tid,omitempty"`
	KeyID  string `json:"kid,omitempty"`
	Role   string `json:"role,omitempty"`
	jwt.RegisteredClaims
}

// Signer signs and verifies tokens with one HMAC key. Safe for concurrent
// use.
type Signer struct {
	key   []byte
	clock clock.Clock
}

// NewSigner returns a signer for key, which must be at least 32 bytes.
func NewSigner(key []byte, c clock.Clock) (*Signer, error) {
	if len(key) < 32 {
		return nil, fmt.Errorf("token: signing key is %d bytes, want at least 32", len(key))
	}
	if c == nil {
		c = clock.Real{}
	}
	return &Signer{key: append([]byte(nil), key...), clock: c}, nil
}

// Sign returns a signed token for c.
func (s *Signer) Sign(c Claims) (string, error) {
	now := s.clock.Now()
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, jwtClaims{
		Tenant: c.Tenant, KeyID: c.KeyID, Role: c.Role,
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    "repool",
			Audience:  jwt.ClaimStrings{c.Audience},
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(c.ExpiresAt),
		},
	})
	return t.SignedString(s.key)
}

// Verify checks tok's signature (HS256 only), expiry and audience and
// returns its claims, or an error wrapping ErrInvalid. Only the canonical
// base64url spelling of a token verifies: a token is accepted exactly as it
// was issued, never in one of the other spellings that decode to the same
// bytes (unused low bits of a segment's last character set).
func (s *Signer) Verify(tok, audience string) (Claims, error) {
	var jc jwtClaims
	_, err := jwt.ParseWithClaims(tok, &jc, func(*jwt.Token) (any, error) { return s.key, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithStrictDecoding(),
		jwt.WithExpirationRequired(),
		jwt.WithAudience(audience),
		jwt.WithIssuer("repool"),
		jwt.WithTimeFunc(s.clock.Now),
	)
	if err != nil {
		return Claims{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return Claims{Audience: audience, Tenant: jc.Tenant, KeyID: jc.KeyID, Role: jc.Role, ExpiresAt: jc.ExpiresAt.Time}, nil
}

// Now returns the signer's clock reading, so that callers compute expiries
// on the same clock that verification uses.
func (s *Signer) Now() time.Time { return s.clock.Now() }
