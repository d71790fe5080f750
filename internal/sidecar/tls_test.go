package sidecar_test

import (
	"testing"
	"time"

	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/config"
	"github.com/repool/repool/internal/sidecar/resilience"
	"github.com/repool/repool/internal/tlsconf"
	"github.com/repool/repool/internal/tlsconf/tlstest"
)

// tlsServer starts the real server over TLS, with a certificate for
// repool.test and 127.0.0.1 signed by ca, requiring client certificates
// signed by clients when set; it returns the gRPC address and the demo key.
func tlsServer(tb testing.TB, ca, clients *tlstest.CA) (grpcAddr, apiKey string) {
	tb.Helper()
	dir := tb.TempDir()
	cfg := serverConfig(dir)
	cfg.TLSCert, cfg.TLSKey = ca.Issue("server", "repool.test", "127.0.0.1").Write(tb, dir, "server")
	if clients != nil {
		cfg.TLSClientCA = clients.WriteCA(dir, "clients.crt")
	}
	return runServer(tb, cfg)
}

// tlsProvider is a provider over TLS trusting ca, with quick retries (so
// that a retry would show in the metrics) and an optional client pair.
func tlsProvider(addr, key string, ca *tlstest.CA, serverName string, client *tlstest.Pair) config.Provider {
	p := config.Provider{
		Endpoint: addr, APIKey: key, Timeout: 2 * time.Second,
		TLS:     config.TLS{CAFile: "ca.crt", CA: string(ca.PEM), ServerName: serverName},
		Retry:   resilience.RetryPolicy{MaxRetries: 3, InitialInterval: time.Millisecond, MaxInterval: 2 * time.Millisecond},
		Breaker: resilience.BreakerPolicy{MinRequests: 1, OpenTimeout: time.Minute},
	}
	if client != nil {
		p.TLS.CertFile, p.TLS.KeyFile, p.TLS.Cert, p.TLS.Key = "c.crt", "c.key", string(client.Cert), string(client.Key)
	}
	return p
}

// TestTLSToTheServer: the sidecar calls a TLS server with the server's
// certificate verified, with a client certificate for mutual TLS; a
// certificate that does not verify is a "tls" error, answered at once
// (not retried) and not counted by the breaker.
func TestTLSToTheServer(t *testing.T) {
	ca, clients := tlstest.NewCA(t, "server CA"), tlstest.NewCA(t, "clients CA")
	addr, key := tlsServer(t, ca, nil)
	mAddr, mKey := tlsServer(t, ca, clients)
	client := clients.Issue("sidecar")
	stranger := tlstest.NewCA(t, "stranger")
	h := start(t, config.Config{Providers: map[string]config.Provider{
		"ok":         tlsProvider(addr, key, ca, "repool.test", nil),
		"by-ip":      tlsProvider(addr, key, ca, "", nil), // the certificate holds 127.0.0.1
		"unknown-ca": tlsProvider(addr, key, stranger, "repool.test", nil),
		"wrong-name": tlsProvider(addr, key, ca, "other.test", nil),
		"mtls":       tlsProvider(mAddr, mKey, ca, "repool.test", &client),
		"mtls-none":  tlsProvider(mAddr, mKey, ca, "repool.test", nil),
		"plaintext":  {Endpoint: addr, APIKey: key, Timeout: 2 * time.Second},
	}}, sidecar.Options{})

	for _, tt := range []struct {
		provider string
		ok       bool
	}{
		{"ok", true}, {"by-ip", true}, {"mtls", true},
		{"unknown-ca", false}, {"wrong-name", false}, {"mtls-none", false}, {"plaintext", false},
	} {
		r := h.do("POST", "/v1/providers/"+tt.provider+"/resources", `{"resources":[{"id":"proxy-1"}]}`)
		if tt.ok {
			if r.status != 200 {
				t.Errorf("register through %s = %d %s, want 200", tt.provider, r.status, r.raw)
			}
			continue
		}
		if tt.provider == "plaintext" {
			// h2c to a TLS listener: the server closes the connection; no
			// TLS error on the client's side to name.
			if r.status < 500 {
				t.Errorf("register in plaintext to a TLS server = %d %s, want a 5xx", r.status, r.raw)
			}
			continue
		}
		if r.status != 502 || r.errCode() != "tls" {
			t.Errorf("register through %s = %d %s, want 502 with error code tls", tt.provider, r.status, r.raw)
		}
		if got := h.metric("repool_sidecar_retries_total", map[string]string{"provider": tt.provider}); got != 0 {
			t.Errorf("retries through %s = %v, want 0: a bad certificate is not retried", tt.provider, got)
		}
		b := h.breaker(tt.provider)
		counts, _ := b["counts"].(map[string]any)
		if b["state"] != "closed" || counts["failures"] != 0.0 {
			t.Errorf("breaker of %s = %v, want closed with no failure counted", tt.provider, b)
		}
	}
}

// TestTLSReload: a reload whose TLS files changed (here the CA: the
// operator fixed it) reconnects the provider with the new ones.
func TestTLSReload(t *testing.T) {
	ca, stranger := tlstest.NewCA(t, "server CA"), tlstest.NewCA(t, "stranger")
	addr, key := tlsServer(t, ca, nil)
	h := start(t, one("p", tlsProvider(addr, key, stranger, "repool.test", nil)), sidecar.Options{})
	if r := h.do("POST", "/v1/providers/p/resources", `{"resources":[{"id":"proxy-1"}]}`); r.errCode() != "tls" {
		t.Fatalf("register trusting the wrong CA = %d %s, want error code tls", r.status, r.raw)
	}
	if err := h.s.Apply(one("p", tlsProvider(addr, key, ca, "repool.test", nil))); err != nil {
		t.Fatalf("Apply(the right CA) = %v", err)
	}
	if r := h.do("POST", "/v1/providers/p/resources", `{"resources":[{"id":"proxy-1"}]}`); r.status != 200 {
		t.Fatalf("register after the reload = %d %s, want 200", r.status, r.raw)
	}
}

// TestCertExpiryMetric: repool_tls_cert_expiry_timestamp_seconds says when
// each provider's client certificate and CA expire, follows a reload, and
// has no series for a provider without TLS files.
func TestCertExpiryMetric(t *testing.T) {
	ca, clients := tlstest.NewCA(t, "server CA"), tlstest.NewCA(t, "clients CA")
	addr, key := tlsServer(t, ca, clients)
	soon := time.Now().Add(5 * time.Hour).Truncate(time.Second)
	first := clients.IssueValid("sidecar", time.Now().Add(-time.Hour), soon)
	h := start(t, config.Config{Providers: map[string]config.Provider{
		"p":     tlsProvider(addr, key, ca, "repool.test", &first),
		"plain": {Endpoint: addr, APIKey: key, Timeout: 2 * time.Second},
	}}, sidecar.Options{})
	const name = "repool_tls_cert_expiry_timestamp_seconds"
	caExpiry, err := tlsconf.EarliestExpiry("ca", ca.PEM)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.metric(name, map[string]string{"provider": "p", "cert": "client"}); got != float64(soon.Unix()) {
		t.Errorf("client certificate expiry = %v, want %d", got, soon.Unix())
	}
	if got := h.metric(name, map[string]string{"provider": "p", "cert": "ca"}); got != float64(caExpiry.Unix()) {
		t.Errorf("CA expiry = %v, want %d", got, caExpiry.Unix())
	}
	if got := h.metric(name, map[string]string{"provider": "plain"}); got != 0 {
		t.Errorf("a provider without TLS files has expiry series summing to %v, want none", got)
	}
	later := soon.Add(time.Hour)
	renewed := clients.IssueValid("sidecar", time.Now().Add(-time.Hour), later)
	if err := h.s.Apply(one("p", tlsProvider(addr, key, ca, "repool.test", &renewed))); err != nil {
		t.Fatalf("Apply(a renewed client certificate) = %v", err)
	}
	if got := h.metric(name, map[string]string{"provider": "p", "cert": "client"}); got != float64(later.Unix()) {
		t.Errorf("client certificate expiry after the reload = %v, want %d", got, later.Unix())
	}
}
