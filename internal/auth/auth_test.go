package auth

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/token"
)

// fakeStore serves one key from memory; down makes every call fail as an
// outage would.
type fakeStore struct {
	key    store.Key
	tenant store.Tenant
	down   bool
	calls  int
	during func() // when set, runs inside LookupKey after the key is read
}

func (f *fakeStore) LookupKey(_ context.Context, d []byte) (store.Key, store.Tenant, error) {
	f.calls++
	if f.during != nil {
		k, t := f.key, f.tenant
		f.during()
		return k, t, nil
	}
	if f.down {
		return store.Key{}, store.Tenant{}, store.ErrUnavailable
	}
	if !bytes.Equal(d, f.key.Digest) {
		return store.Key{}, store.Tenant{}, store.ErrNotFound
	}
	return f.key, f.tenant, nil
}

func (f *fakeStore) GetKey(_ context.Context, tenant, id string) (store.Key, error) {
	f.calls++
	if f.down {
		return store.Key{}, store.ErrUnavailable
	}
	if tenant != f.key.TenantID || id != f.key.ID {
		return store.Key{}, store.ErrNotFound
	}
	return f.key, nil
}

func (f *fakeStore) GetTenant(_ context.Context, id string) (store.Tenant, error) {
	f.calls++
	if f.down {
		return store.Tenant{}, store.ErrUnavailable
	}
	if id != f.tenant.ID {
		return store.Tenant{}, store.ErrNotFound
	}
	return f.tenant, nil
}

func setup(t testing.TB) (*Authenticator, *fakeStore, *clock.Fake, string) {
	t.Helper()
	plain, prefix, digest, err := NewKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(plain, prefix) || len(plain) < 40 {
		t.Fatalf("NewKey() = %q with prefix %q", plain, prefix)
	}
	fs := &fakeStore{
		key:    store.Key{ID: "k1", TenantID: "acme", Digest: digest},
		tenant: store.Tenant{ID: "acme", Status: store.StatusActive},
	}
	fc := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	signer, _ := token.NewSigner(bytes.Repeat([]byte{1}, 32), fc)
	a, err := New(Config{Store: fs, Signer: signer, Clock: fc})
	if err != nil {
		t.Fatal(err)
	}
	return a, fs, fc, plain
}

func TestAPIKey(t *testing.T) {
	a, fs, _, plain := setup(t)
	p, err := a.APIKey(context.Background(), plain)
	if err != nil || p != (Principal{Tenant: "acme", KeyID: "k1"}) {
		t.Fatalf("APIKey(valid) = %+v, %v", p, err)
	}
	for _, bad := range []string{"", "rpk_wrong", plain + "x", "Bearer " + plain, strings.Repeat("rpk_", 100)} {
		if _, err := a.APIKey(context.Background(), bad); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("APIKey(%q) = %v, want ErrUnauthenticated", bad, err)
		}
	}
	fs.key.RevokedAt = time.Now()
	a.Invalidate("acme")
	if _, err := a.APIKey(context.Background(), plain); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("APIKey(revoked) = %v, want ErrUnauthenticated", err)
	}
	fs.key.RevokedAt = time.Time{}
	fs.tenant.Status = store.StatusSuspended
	a.Invalidate("acme")
	if _, err := a.APIKey(context.Background(), plain); !errors.Is(err, ErrSuspended) {
		t.Fatalf("APIKey(suspended tenant) = %v, want ErrSuspended", err)
	}
	fs.down = true
	a.Invalidate("acme")
	if _, err := a.APIKey(context.Background(), plain); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("APIKey(store down) = %v, want ErrUnavailable", err)
	}
}

func TestAPIKeyCache(t *testing.T) {
	a, fs, fc, plain := setup(t)
	for i := 0; i < 5; i++ {
		if _, err := a.APIKey(context.Background(), plain); err != nil {
			t.Fatal(err)
		}
	}
	if fs.calls != 1 {
		t.Fatalf("store calls = %d for 5 lookups within the cache TTL, want 1", fs.calls)
	}
	fc.Advance(3 * time.Second)
	fs.key.RevokedAt = fc.Now() // revoked through another server: seen after the TTL
	if _, err := a.APIKey(context.Background(), plain); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("APIKey(revoked elsewhere, after TTL) = %v, want ErrUnauthenticated", err)
	}
}

func TestBearer(t *testing.T) {
	a, fs, fc, _ := setup(t)
	tok, exp, err := a.IssueToken(Principal{Tenant: "acme", KeyID: "k1"})
	if err != nil || !exp.Equal(fc.Now().Add(15*time.Minute)) {
		t.Fatalf("IssueToken() = %v, %v; want expiry in 15m", exp, err)
	}
	if p, err := a.Bearer(context.Background(), tok); err != nil || p.Tenant != "acme" {
		t.Fatalf("Bearer(valid) = %+v, %v", p, err)
	}
	forged, _, _ := a.IssueToken(Principal{Tenant: "other", KeyID: "k1"})
	if _, err := a.Bearer(context.Background(), forged); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("Bearer(token naming another tenant for the key) = %v, want ErrUnauthenticated", err)
	}
	fs.key.RevokedAt = fc.Now()
	a.Invalidate("acme")
	if _, err := a.Bearer(context.Background(), tok); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("Bearer(token of a revoked key) = %v, want ErrUnauthenticated", err)
	}
	fs.key.RevokedAt = time.Time{}
	a.Invalidate("acme")
	fc.Advance(16 * time.Minute)
	if _, err := a.Bearer(context.Background(), tok); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("Bearer(expired) = %v, want ErrUnauthenticated", err)
	}
}

func TestContext(t *testing.T) {
	if _, ok := FromContext(context.Background()); ok {
		t.Fatal("FromContext(empty) = ok, want no principal")
	}
	if _, ok := FromContext(NewContext(context.Background(), Principal{})); ok {
		t.Fatal("FromContext(principal without tenant) = ok, want no principal")
	}
	ctx := NewContext(context.Background(), Principal{Tenant: "t", KeyID: "k"})
	if p, ok := FromContext(ctx); !ok || p.Tenant != "t" {
		t.Fatalf("FromContext() = %+v, %v", p, ok)
	}
}

// TestInvalidateDuringALookup: a lookup that read the key before a
// revocation and finishes after its Invalidate must not be cached, or the
// revoked key would keep working for the cache TTL.
func TestInvalidateDuringALookup(t *testing.T) {
	a, fs, _, plain := setup(t)
	fs.during = func() {
		fs.key.RevokedAt = time.Now() // revoked through this server meanwhile
		a.Invalidate("acme")
	}
	if _, err := a.APIKey(context.Background(), plain); err != nil {
		t.Fatalf("APIKey() that began before the revocation = %v, want it admitted", err)
	}
	fs.during = nil
	if _, err := a.APIKey(context.Background(), plain); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("APIKey() after the revocation = %v, want ErrUnauthenticated (the lookup begun before must not be cached)", err)
	}
}

// TestClaim: what the gRPC tap learns of a credential without the store.
func TestClaim(t *testing.T) {
	a, _, fc, plain := setup(t)
	for _, c := range []struct{ name, key, bearer string }{
		{"no credential", "", ""},
		{"a key without the prefix", "nope", ""},
		{"a key too long", KeyPrefix + strings.Repeat("x", 200), ""},
		{"a token that does not verify", "", "eyJhbGciOiJIUzI1NiJ9.e30.bad"},
	} {
		if tenant, v := a.Claim(c.key, c.bearer); v != Invalid || tenant != "" {
			t.Errorf("Claim(%s) = %q, %v; want \"\", Invalid", c.name, tenant, v)
		}
	}
	if tenant, v := a.Claim(plain, ""); v != Unknown || tenant != "" {
		t.Fatalf("Claim(a key never used) = %q, %v; want \"\", Unknown", tenant, v)
	}
	if _, err := a.APIKey(context.Background(), plain); err != nil {
		t.Fatal(err)
	}
	if tenant, v := a.Claim(plain, ""); v != Claimed || tenant != "acme" {
		t.Fatalf("Claim(a key that authenticated) = %q, %v; want acme, Claimed", tenant, v)
	}
	a.Invalidate("acme")
	if _, v := a.Claim(plain, ""); v != Unknown {
		t.Fatalf("Claim(the key after its tenant was invalidated) = %v, want Unknown", v)
	}
	tok, _, err := a.IssueToken(Principal{Tenant: "acme", KeyID: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	if tenant, v := a.Claim("", tok); v != Claimed || tenant != "acme" {
		t.Fatalf("Claim(a valid token) = %q, %v; want acme, Claimed", tenant, v)
	}
	fc.Advance(16 * time.Minute)
	if _, v := a.Claim("", tok); v != Invalid {
		t.Fatalf("Claim(an expired token) = %v, want Invalid", v)
	}
}

// TestBearerVerifiedOnce: a token seen before is not verified again (no
// allocation: the HMAC and JSON parse allocate 60-odd times), but is still
// refused at its expiry, after its key's revocation, and in any spelling
// but the one verified; the cache stays within MaxVerified.
func TestBearerVerifiedOnce(t *testing.T) {
	a, fs, fc, _ := setup(t)
	tok, _, err := a.IssueToken(Principal{Tenant: "acme", KeyID: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Bearer(context.Background(), tok); err != nil {
		t.Fatalf("Bearer(valid) = %v", err)
	}
	if got := testing.AllocsPerRun(100, func() { _, _ = a.Bearer(context.Background(), tok) }); got != 0 {
		t.Fatalf("Bearer of a token verified before allocates %v times, want 0 (not verified again)", got)
	}
	if _, err := a.Bearer(context.Background(), tok+"x"); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("Bearer(the verified token with a byte more) = %v, want ErrUnauthenticated", err)
	}
	fs.key.RevokedAt = fc.Now()
	a.Invalidate("acme")
	if _, err := a.Bearer(context.Background(), tok); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("Bearer(a verified token of a key revoked since) = %v, want ErrUnauthenticated", err)
	}
	fs.key.RevokedAt = time.Time{}
	a.Invalidate("acme")
	if _, err := a.Bearer(context.Background(), tok); err != nil {
		t.Fatalf("Bearer(valid, again) = %v", err)
	}
	fc.Advance(15 * time.Minute) // the token's expiry, with no Invalidate between
	if _, err := a.Bearer(context.Background(), tok); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("Bearer(a verified token at its expiry) = %v, want ErrUnauthenticated", err)
	}

	a.cfg.MaxVerified = 2
	for i := range 5 {
		fc.Advance(time.Second) // another issue time: another token
		tok, _, _ := a.IssueToken(Principal{Tenant: "acme", KeyID: "k1"})
		if _, err := a.Bearer(context.Background(), tok); err != nil {
			t.Fatalf("Bearer(token %d) = %v", i, err)
		}
		if n := len(a.verified); n > 2 {
			t.Fatalf("%d verified tokens kept, want at most MaxVerified (2)", n)
		}
	}
}

// BenchmarkCredentials: what a call pays to authenticate, with a cached API
// key and with a bearer token seen before (the sidecar's way), side by side.
func BenchmarkCredentials(b *testing.B) {
	a, _, _, plain := setup(b)
	tok, _, err := a.IssueToken(Principal{Tenant: "acme", KeyID: "k1"})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("api-key", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := a.APIKey(context.Background(), plain); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("bearer", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := a.Bearer(context.Background(), tok); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("bearer-uncached", func(b *testing.B) {
		a.cfg.MaxVerified = -1
		defer func() { a.cfg.MaxVerified = 4096 }()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := a.Bearer(context.Background(), tok); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestBearerVerified: the claims a tap verified authenticate each call of
// their own with one key lookup, and a revoked key, a suspended tenant and
// an expired token are refused from the next call, as Bearer refuses them.
func TestBearerVerified(t *testing.T) {
	a, fs, fc, _ := setup(t)
	tok, _, err := a.IssueToken(Principal{Tenant: "acme", KeyID: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := a.ClaimBearer("not-a-token"); ok {
		t.Fatal("ClaimBearer(garbage) = ok, want refused")
	}
	v, ok := a.ClaimBearer(tok)
	if !ok || v.Tenant() != "acme" {
		t.Fatalf("ClaimBearer(valid) = %q, %v; want acme, ok", v.Tenant(), ok)
	}
	if p, err := a.BearerVerified(context.Background(), v); err != nil || p.Tenant != "acme" {
		t.Fatalf("BearerVerified(valid) = %+v, %v", p, err)
	}
	if got := testing.AllocsPerRun(100, func() { _, _ = a.BearerVerified(context.Background(), v) }); got != 0 {
		t.Fatalf("BearerVerified allocates %v times, want 0 (a cached key lookup)", got)
	}
	if _, err := a.BearerVerified(context.Background(), Verified{}); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("BearerVerified(zero) = %v, want ErrUnauthenticated", err)
	}
	fs.key.RevokedAt = fc.Now()
	a.Invalidate("acme")
	if _, err := a.BearerVerified(context.Background(), v); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("BearerVerified(revoked key) = %v, want ErrUnauthenticated", err)
	}
	fs.key.RevokedAt = time.Time{}
	fs.tenant.Status = store.StatusSuspended
	a.Invalidate("acme")
	if _, err := a.BearerVerified(context.Background(), v); !errors.Is(err, ErrSuspended) {
		t.Fatalf("BearerVerified(suspended tenant) = %v, want ErrSuspended", err)
	}
	fs.tenant.Status = store.StatusActive
	a.Invalidate("acme")
	fc.Advance(16 * time.Minute)
	if _, err := a.BearerVerified(context.Background(), v); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("BearerVerified(expired) = %v, want ErrUnauthenticated", err)
	}
}
