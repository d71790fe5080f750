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

func TestSignVerify(t *testing.T) {
	fc := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	key := bytes.Repeat([]byte{7}, 32)
	s, err := NewSigner(key, fc)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewSigner(bytes.Repeat([]byte{8}, 32), fc)
	good, err := s.Sign(Claims{Audience: AudienceData, Tenant: "t1", KeyID: "k1", ExpiresAt: fc.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Verify(good, AudienceData)
	if err != nil || c.Tenant != "t1" || c.KeyID != "k1" {
		t.Fatalf("Verify(good) = %+v, %v", c, err)
	}

	foreign, _ := other.Sign(Claims{Audience: AudienceData, Tenant: "t1", ExpiresAt: fc.Now().Add(time.Minute)})
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"aud": AudienceData, "iss": "repool", "exp": fc.Now().Add(time.Minute).Unix()}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	hs512, _ := jwt.NewWithClaims(jwt.SigningMethodHS512, jwt.MapClaims{"aud": AudienceData, "iss": "repool", "exp": fc.Now().Add(time.Minute).Unix()}).SignedString(key)
	noExp, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"aud": AudienceData, "iss": "repool"}).SignedString(key)
	parts := strings.Split(good, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString(bytes.Replace(payload, []byte(`"t1"`), []byte(`"t2"`), 1)) + "." + parts[2]
	// The 32-byte signature leaves 2 bits of its last base64 character
	// unused: flipping one spells the same bytes differently.
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, good[len(good)-1])
	respelled := good[:len(good)-1] + string(alphabet[last^1])

	tests := []struct {
		name, tok, aud string
		advance        time.Duration
	}{
		{"foreign signature", foreign, AudienceData, 0},
		{"alg none", none, AudienceData, 0},
		{"other HMAC method", hs512, AudienceData, 0},
		{"no expiry", noExp, AudienceData, 0},
		{"tampered tenant", tampered, AudienceData, 0},
		{"non-canonical base64 signature", respelled, AudienceData, 0},
		{"wrong audience", good, AudienceControl, 0},
		{"garbage", "not-a-token", AudienceData, 0},
		{"expired", good, AudienceData, 2 * time.Minute},
	}
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
