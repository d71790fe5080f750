package token

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/repool/repool/internal/clock"
)

// testClock is the tests' signer clock.
func testClock() *clock.Fake { return clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) }

// testKey is the tests' signing key.
var testKey = bytes.Repeat([]byte{7}, 32)

// forgedTokens are data-plane tokens, unexpired at exp, that a signer
// with testKey must refuse, by what is wrong with them.
func forgedTokens(tb testing.TB, c clock.Clock, exp time.Time) map[string]string {
	tb.Helper()
	other, err := NewSigner(bytes.Repeat([]byte{8}, 32), c)
	if err != nil {
		tb.Fatal(err)
	}
	claims := func(m jwt.MapClaims) jwt.MapClaims {
		m["aud"] = AudienceData
		return m
	}
	out := map[string]string{}
	for name, sign := range map[string]func() (string, error){
		"foreign signature": func() (string, error) {
			return other.Sign(Claims{Audience: AudienceData, Tenant: "t1", ExpiresAt: exp})
		},
		"alg none": func() (string, error) {
			return jwt.NewWithClaims(jwt.SigningMethodNone, claims(jwt.MapClaims{"iss": "repool", "exp": exp.Unix()})).SignedString(jwt.UnsafeAllowNoneSignatureType)
		},
		"other HMAC method": func() (string, error) {
			return jwt.NewWithClaims(jwt.SigningMethodHS512, claims(jwt.MapClaims{"iss": "repool", "exp": exp.Unix()})).SignedString(testKey)
		},
		"no expiry": func() (string, error) {
			return jwt.NewWithClaims(jwt.SigningMethodHS256, claims(jwt.MapClaims{"iss": "repool"})).SignedString(testKey)
		},
		"no issuer": func() (string, error) {
			return jwt.NewWithClaims(jwt.SigningMethodHS256, claims(jwt.MapClaims{"exp": exp.Unix()})).SignedString(testKey)
		},
	} {
		tok, err := sign()
		if err != nil {
			tb.Fatalf("signing the %s token: %v", name, err)
		}
		out[name] = tok
	}
	return out
}

func TestSignVerify(t *testing.T) {
	fc := testClock()
	s, err := NewSigner(testKey, fc)
	if err != nil {
		t.Fatal(err)
	}
	good, err := s.Sign(Claims{Audience: AudienceData, Tenant: "t1", KeyID: "k1", ExpiresAt: fc.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Verify(good, AudienceData)
	if err != nil || c.Tenant != "t1" || c.KeyID != "k1" {
		t.Fatalf("Verify(good) = %+v, %v", c, err)
	}

	parts := strings.Split(good, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString(bytes.Replace(payload, []byte(`"t1"`), []byte(`"t2"`), 1)) + "." + parts[2]
	// The 32-byte signature leaves 2 bits of its last base64 character
	// unused: flipping one spells the same bytes differently.
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, good[len(good)-1])
	respelled := good[:len(good)-1] + string(alphabet[last^1])

	type verifyCase struct {
		name, tok, aud string
		advance        time.Duration
	}
	var tests []verifyCase
	for name, tok := range forgedTokens(t, fc, fc.Now().Add(time.Minute)) {
		tests = append(tests, verifyCase{name, tok, AudienceData, 0})
	}
	tests = append(tests, []verifyCase{
		{"tampered tenant", tampered, AudienceData, 0},
		{"non-canonical base64 signature", respelled, AudienceData, 0},
		{"wrong audience", good, AudienceControl, 0},
		{"garbage", "not-a-token", AudienceData, 0},
		{"expired", good, AudienceData, 2 * time.Minute},
	}...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc.Advance(tt.advance)
			defer fc.Advance(-tt.advance)
			if _, err := s.Verify(tt.tok, tt.aud); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Verify() = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestShortKeyRefused(t *testing.T) {
	if _, err := NewSigner(make([]byte, 16), nil); err == nil {
		t.Fatal("NewSigner(16 bytes) = nil error, want refusal")
	}
}
