package token

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/repool/repool/internal/testenv"
)

// FuzzVerify feeds arbitrary token strings to Verify, for either audience.
// A token verifies exactly when it is, byte for byte, one that the signer
// issued for that audience and that has not expired (no other spelling of
// the same token, no forgery), and then it has the claims it was signed
// with. Every refusal wraps ErrInvalid and never quotes the token or its
// signature, and no input takes longer than testenv.FuzzBound.
func FuzzVerify(f *testing.F) {
	fc := testClock()
	s, err := NewSigner(testKey, fc)
	if err != nil {
		f.Fatal(err)
	}
	sign := func(c Claims) string {
		tok, err := s.Sign(c)
		if err != nil {
			f.Fatalf("Sign(%+v) = %v", c, err)
		}
		return tok
	}
	exp := fc.Now().Add(time.Hour)
	issued := map[string]Claims{ // the tokens that verify, by token
		sign(Claims{Audience: AudienceData, Tenant: "t1", KeyID: "k1", ExpiresAt: exp}):            {Audience: AudienceData, Tenant: "t1", KeyID: "k1", ExpiresAt: exp},
		sign(Claims{Audience: AudienceControl, Role: "operator", ExpiresAt: exp}):                  {Audience: AudienceControl, Role: "operator", ExpiresAt: exp},
		sign(Claims{Audience: AudienceControl, Role: "tenant-admin", Tenant: "a", ExpiresAt: exp}): {Audience: AudienceControl, Role: "tenant-admin", Tenant: "a", ExpiresAt: exp},
	}
	for _, tok := range slices.Sorted(maps.Keys(issued)) {
		f.Add(tok, false)
		f.Add(tok, true)
		f.Add(tok+"A", false)
		f.Add(strings.Replace(tok, ".", "..", 1), false)
	}
	expired := sign(Claims{Audience: AudienceData, Tenant: "t1", KeyID: "k1", ExpiresAt: fc.Now().Add(-time.Second)})
	forged := forgedTokens(f, fc, exp)
	for _, name := range slices.Sorted(maps.Keys(forged)) {
		f.Add(forged[name], false)
	}
	for _, tok := range []string{expired, "", "not-a-token", "a.b.c", "Bearer x", "..", "\x00.\xff."} {
		f.Add(tok, false)
	}
	f.Fuzz(func(t *testing.T, tok string, control bool) {
		aud := AudienceData
		if control {
			aud = AudienceControl
		}
		var c Claims
		testenv.Timed(t, "Verify", func() { c, err = s.Verify(tok, aud) })
		want, ok := issued[tok]
		ok = ok && want.Audience == aud
		switch {
		case ok && err != nil:
			t.Fatalf("Verify(issued %s token) = %v, want the claims %+v", aud, err, want)
		case !ok && err == nil:
			t.Fatalf("Verify(%q, %s) = %+v, want ErrInvalid: it is not a token the signer issued for %s", tok, aud, c, aud)
		case ok && !c.ExpiresAt.Equal(want.ExpiresAt):
			t.Fatalf("Verify(issued token).ExpiresAt = %v, want %v", c.ExpiresAt, want.ExpiresAt)
		case ok:
			c.ExpiresAt = want.ExpiresAt
			if c != want {
				t.Fatalf("Verify(issued token) = %+v, want %+v", c, want)
			}
		case !errors.Is(err, ErrInvalid):
			t.Fatalf("Verify(%q) = %v, want an error wrapping ErrInvalid", tok, err)
		default:
			// A JWT-shaped input is a secret, and so is its signature;
			// other strings could be words of the message.
			if parts := strings.Split(tok, "."); len(parts) == 3 && len(parts[2]) >= 16 {
				testenv.NoSecret(t, "Verify error", err.Error(), tok, parts[2])
			}
		}
	})
}
