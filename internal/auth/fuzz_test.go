package auth

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/repool/repool/internal/testenv"
	"github.com/repool/repool/internal/token"
)

// fuzzSetup is setup with a fixed key, so that seeds and corpus entries
// can spell it.
func fuzzSetup(f *testing.F) (*Authenticator, *fakeStore, string) {
	a, fs, _, _ := setup(f)
	plain, _, digest, err := NewKey(bytes.NewReader(bytes.Repeat([]byte{9}, 32)))
	if err != nil {
		f.Fatal(err)
	}
	fs.key.Digest = digest
	return a, fs, plain
}

// cacheOf copies the authenticator's caches.
func cacheOf(a *Authenticator) (byDigest, byKeyID map[string]cached) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.byDigest), maps.Clone(a.byKeyID)
}

// checkRefusal fails t unless err is exactly ErrUnauthenticated, quotes
// none of secrets, and the caches are as before.
func checkRefusal(t *testing.T, a *Authenticator, call string, err error, digests, keyIDs map[string]cached, secrets ...string) {
	t.Helper()
	if err != ErrUnauthenticated {
		t.Fatalf("%s = %v, want ErrUnauthenticated", call, err)
	}
	testenv.NoSecret(t, call+" error", err.Error(), secrets...)
	if d, k := cacheOf(a); !maps.EqualFunc(d, digests, cachedEqual) || !maps.EqualFunc(k, keyIDs, cachedEqual) {
		t.Fatalf("%s was refused but changed the cache: %d/%d entries, want %d/%d", call, len(d), len(k), len(digests), len(keyIDs))
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
	a, _, plain := fuzzSetup(f)
	for _, s := range []string{
		plain, plain + "x", plain[:len(plain)-1], strings.ToUpper(plain), " " + plain, plain + "\n",
		"Bearer " + plain, "", "rpk_", "rpk_wrong", "RPK_" + plain[4:], strings.Repeat("rpk_", 32),
		KeyPrefix + strings.Repeat("A", 124), KeyPrefix + strings.Repeat("A", 125), "rpk_\x00\xff",
	} {
		f.Add(s)
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, s string) {
		digests, keyIDs := cacheOf(a)
		var p Principal
		var err error
		testenv.Timed(t, "APIKey", func() { p, err = a.APIKey(ctx, s) })
		if s == plain {
			if err != nil || p != (Principal{Tenant: "acme", KeyID: "k1"}) {
				t.Fatalf("APIKey(the valid key) = %+v, %v; want acme/k1", p, err)
			}
			return
		}
		if err == nil {
			t.Fatalf("APIKey(%q) = %+v, want ErrUnauthenticated: only %q is a key", s, p, plain)
		}
		var secrets []string
		if strings.HasPrefix(s, KeyPrefix) {
			secrets = []string{s, s[len(KeyPrefix):]}
		}
		checkRefusal(t, a, "APIKey", err, digests, keyIDs, secrets...)
	})
}

// FuzzBearer feeds arbitrary strings to Bearer: exactly the data-plane
// token issued for the valid key is admitted; a token of the other
// audience, an expired one, one for an unknown key or another tenant, and
// every other string are ErrUnauthenticated, which quotes nothing of the
// token and leaves the lookup cache as it was. No input takes longer than
// testenv.FuzzBound.
func FuzzBearer(f *testing.F) {
	a, fs, _ := fuzzSetup(f)
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
		digests, keyIDs := cacheOf(a)
		calls := fs.calls
		var p Principal
		var err error
		testenv.Timed(t, "Bearer", func() { p, err = a.Bearer(ctx, s) })
		if s == good {
			if err != nil || p != (Principal{Tenant: "acme", KeyID: "k1"}) {
				t.Fatalf("Bearer(the issued token) = %+v, %v; want acme/k1", p, err)
			}
			return
		}
		if err == nil {
			t.Fatalf("Bearer(%q) = %+v, want ErrUnauthenticated: it is not the issued token", s, p)
		}
		if errors.Is(err, ErrUnavailable) || fs.calls > calls+2 {
			t.Fatalf("Bearer(%q) = %v after %d store calls, want ErrUnauthenticated after at most 2", s, err, fs.calls-calls)
		}
		var secrets []string
		if parts := strings.Split(s, "."); len(parts) == 3 && len(parts[2]) >= 16 {
			secrets = []string{s, parts[2]}
		}
		checkRefusal(t, a, "Bearer", err, digests, keyIDs, secrets...)
	})
}
