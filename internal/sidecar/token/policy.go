package token

import (
	"fmt"
	"time"

	"github.com/repool/repool/internal/defaults"
)

// Policy configures how a provider's tokens are cached and refreshed. The
// zero value of every field means its default (see WithDefaults).
type Policy struct {
	// Skew is the safety margin at the end of a token's life: a token is
	// used only until expires_at - Skew, and its Redis entry expires then.
	// It keeps back at most half a token's lifetime. Default 30s.
	Skew time.Duration `yaml:"skew"`
	// RefreshAt is the fraction of a token's lifetime after which it is
	// refreshed in the background while still being served. Each token's
	// refresh point is jittered down by up to 0.05 so that sidecars sharing
	// Redis do not all refresh at once. Default 0.8; range [0.1, 0.95].
	RefreshAt float64 `yaml:"refresh_at"`
	// IssueTimeout bounds one shared fetch (Redis look-up and IssueToken).
	// It runs on a context that no caller owns, so a caller that gives up
	// does not cancel it for the others. Default 5s.
	IssueTimeout time.Duration `yaml:"issue_timeout"`
}

// WithDefaults returns p with defaults in place of zero values.
func (p Policy) WithDefaults() Policy { return defaults.Fill(p, policyDefaults) }

// policyDefaults are the defaults of Policy's fields.
var policyDefaults = Policy{Skew: 30 * time.Second, RefreshAt: 0.8, IssueTimeout: 5 * time.Second}

// Validate names the first bad field (YAML name), after defaults.
func (p Policy) Validate() error {
	p = p.WithDefaults()
	switch {
	case p.Skew < 0:
		return fmt.Errorf("skew %v: must not be negative", p.Skew)
	case p.RefreshAt < 0.1 || p.RefreshAt > 0.95:
		return fmt.Errorf("refresh_at %v: want a fraction in [0.1, 0.95]", p.RefreshAt)
	case p.IssueTimeout < time.Millisecond:
		return fmt.Errorf("issue_timeout %v: want at least 1ms", p.IssueTimeout)
	}
	return nil
}

// Redis configures the shared token cache. The zero value of every field
// but Addr means its default.
type Redis struct {
	// Addr is the server's host:port. Required.
	Addr string `yaml:"addr"`
	// KeyPrefix starts every key: PREFIX + "token:" + provider + ":" +
	// the first 16 hex digits of SHA-256(API key). Default "repool:".
	KeyPrefix string `yaml:"key_prefix"`
	// Username and Password authenticate (Redis ACL); empty for none. The
	// password is a secret: never in a file.
	Username string `yaml:"username"`
	Password string `yaml:"-"`
	// DB is the database number. Default 0.
	DB int `yaml:"db"`
	// Timeout bounds each Redis operation, dialling included. Default
	// 250ms: Redis is an optimisation, never worth waiting for.
	Timeout time.Duration `yaml:"timeout"`
}

// WithDefaults returns r with defaults in place of zero values.
func (r Redis) WithDefaults() Redis {
	if r.KeyPrefix == "" {
		r.KeyPrefix = "repool:"
	}
	if r.Timeout == 0 {
		r.Timeout = 250 * time.Millisecond
	}
	return r
}
