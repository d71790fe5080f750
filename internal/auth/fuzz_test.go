package auth

import (
	"bytes"
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/repool/repool/internal/testenv"
	"github.com/repool/repool/internal/token"
)

// fuzzSetup is setup with a fixed key, so that seeds and corpus entries
// can spell it.
func fuzzSetup(f *testing.F) (*Authenticator, string) {
	a, fs, _, _ := setup(f)
	plain, _, digest, err := NewKey(bytes.NewReader(bytes.Repeat([]byte{9}, 32)))
	if err != nil {
		f.Fatal(err)
	}
	fs.key.Digest = digest
	return a, plain
}

// cacheOf copies the authenticator's caches.
func cacheOf(a *Authenticator) (byDigest, byKeyID map[string]cached) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.byDigest), maps.Clone(a.byKeyID)
}

// checkCredential has call (APIKey or Bearer) judge s: exactly valid is
// admitted, as acme/k1, within testenv.FuzzBound; anything else is exactly
// ErrUnauthenticated, whose text quotes none of secrets, and leaves the
// caches as they were.
func checkCredential(t *testing.T, a *Authenticator, name, s, valid string, call func(string) (Principal, error), secrets []string) {
	t.Helper()
	digests, keyIDs := cacheOf(a)
	var p Principal
	var err error
	testenv.Timed(t, name, func() { p, err = call(s) })
	switch {
	case s == valid && (err != nil || p != Principal{Tenant: "acme", KeyID: "k1"}):
		t.Fatalf("%s(the valid credential) = %+v, %v; want acme/k1", name, p, err)
	case s == valid:
		return
	case err == nil:
		t.Fatalf("%s(%q) = %+v, want ErrUnauthenticated: only %q is valid", name, s, p, valid)
	}
	if err != ErrUnauthenticated {
		t.Fatalf("%s(%q) = %v, want ErrUnauthenticated", name, s, err)
	}
	testenv.NoSecret(t, name+" error", err.Error(), secrets...)
	if d, k := cacheOf(a); !maps.EqualFunc(d, digests, cachedEqual) || !maps.EqualFunc(k, keyIDs, cachedEqual) {
		t.Fatalf("%s(%q) was refused but changed the cache: %d/%d entries, want %d/%d", name, s, len(d), len(k), len(digests), len(keyIDs))
	}
}

func cachedEqual(a, b cached) bool {
	return a.key.ID == b.key.ID && bytes.Equal(a.key.Digest, b.key.Digest) && a.tenant == b.tenant && a.at.Equal(b.at)
}

// FuzzAPIKey feeds arbitrary strings to APIKey with one valid key in the
// store: exactly that key is admitted, as its tenant and key; everything
// else is ErrUnauthenticated, whose text quotes nothing of the input, and
// leaves the lookup cache as it was. No input takes longer than
// testenv.FuzzBound.
func FuzzAPIKey(f *testing.F) {
	a, plain := fuzzSetup(f)
	for _, s := range []string{
		plain, plain + "x", plain[:len(plain)-1], strings.ToUpper(plain), " " + plain, plain + "\n",
		"Bearer " + plain, "", "rpk_", "rpk_wrong", "RPK_" + plain[4:], strings.Repeat("rpk_", 32),
		KeyPrefix + strings.Repeat("A", 124), KeyPrefix + strings.Repeat("A", 125), "rpk_\x00\xff",
	} {
		f.Add(s)
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, s string) {
		var secrets []string
		if strings.HasPrefix(s, KeyPrefix) {
			secrets = []string{s, s[len(KeyPrefix):]}
		}
		checkCredential(t, a, "APIKey", s, plain, func(s string) (Principal, error) { return a.APIKey(ctx, s) }, secrets)
	})
}

// FuzzBearer feeds arbitrary strings to Bearer: exactly the data-plane
// token issued for the valid key is admitted; a token of the other
// audience, an expired one, one for an unknown key or another tenant, and
// every other string are ErrUnauthenticated, which quotes nothing of the
// token and leaves the lookup cache as it was. No input takes longer than
// testenv.FuzzBound.
func FuzzBearer(f *testing.F) {
	a, _ := fuzzSetup(f)
	good, _, err := a.IssueToken(Principal{Tenant: "acme", KeyID: "k1"})
	if err != nil {
		f.Fatal(err)
	}
	signer := a.cfg.Signer
	sign := func(c token.Claims) string {
		tok, err := signer.Sign(c)
		if err != nil {
			f.Fatal(err)
		}
		return tok
	}
	exp := signer.Now().Add(time.Hour)
	for _, s := range []string{
		good, good + "x", strings.ToLower(good), "Bearer " + good, "", "x.y.z",
		sign(token.Claims{Audience: token.AudienceControl, Role: "operator", ExpiresAt: exp}),
		sign(token.Claims{Audience: token.AudienceData, Tenant: "acme", KeyID: "k2", ExpiresAt: exp}),
		sign(token.Claims{Audience: token.AudienceData, Tenant: "other", KeyID: "k1", ExpiresAt: exp}),
		sign(token.Claims{Audience: token.AudienceData, Tenant: "acme", ExpiresAt: exp}),
		sign(token.Claims{Audience: token.AudienceData, KeyID: "k1", ExpiresAt: exp}),
		sign(token.Claims{Audience: token.AudienceData, Tenant: "acme", KeyID: "k1", ExpiresAt: signer.Now().Add(-time.Second)}),
	} {
		f.Add(s)
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, s string) {
		var secrets []string
		if parts := strings.Split(s, "."); len(parts) == 3 && len(parts[2]) >= 16 {
			secrets = []string{s, parts[2]}
		}
		checkCredential(t, a, "Bearer", s, good, func(s string) (Principal, error) { return a.Bearer(ctx, s) }, secrets)
	})
}
