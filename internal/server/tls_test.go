package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/testenv"
	"github.com/repool/repool/internal/tlsconf/tlstest"
)

// tlsServer is a server on loopback with TLS from files in dir.
type tlsServer struct {
	s                 *Server
	key               string
	certFile, keyFile string
	cancel            context.CancelFunc
	done              chan error
}

func startTLS(t *testing.T, cfg Config) *tlsServer {
	t.Helper()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.CheckpointInterval = "127.0.0.1:0", "127.0.0.1:0", time.Hour
	var out bytes.Buffer
	s, err := New(context.Background(), cfg, Options{Out: &out})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &tlsServer{s: s, certFile: cfg.TLSCert, keyFile: cfg.TLSKey, cancel: cancel, done: make(chan error, 1)}
	if m := keyRE.FindStringSubmatch(out.String()); m != nil {
		ts.key = m[1]
	}
	if !strings.Contains(out.String(), "-cacert CA.crt") || !strings.Contains(out.String(), "https://") {
		t.Errorf("first start over TLS printed %q, want grpcurl -cacert and an https:// URL", out.String())
	}
	go func() { ts.done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-ts.done:
		case <-time.After(20 * time.Second):
			t.Error("server did not stop within 20s")
		}
	})
	return ts
}

// tlsClient is a client configuration trusting ca, with an optional
// client certificate.
func tlsClient(t *testing.T, ca *tlstest.CA, client *tlstest.Pair) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	c := &tls.Config{RootCAs: pool, ServerName: "repool.test"}
	if client != nil {
		cert, err := tls.X509KeyPair(client.Cert, client.Key)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c
}

// register calls Register over gRPC with creds and returns the error and
// the ALPN protocol the connection negotiated.
func (ts *tlsServer) register(t *testing.T, creds credentials.TransportCredentials) (string, error) {
	t.Helper()
	conn, err := grpc.NewClient(ts.s.GRPCAddr(), grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(withKey(ts.key), 5*time.Second)
	defer cancel()
	var p peer.Peer
	_, err = repoolv1.NewPoolServiceClient(conn).Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "proxy-1"}}}, grpc.Peer(&p))
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
		return ti.State.NegotiatedProtocol, err
	}
	return "", err
}

// get fetches path over HTTPS with cfg and returns the status (0 when the
// connection fails).
func (ts *tlsServer) get(t *testing.T, cfg *tls.Config, path string) int {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
	resp, err := c.Get("https://" + ts.s.HTTPAddr() + path)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func TestTLSListeners(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "repool test CA")
	certFile, keyFile := ca.Issue("server", "repool.test", "127.0.0.1").Write(t, dir, "server")
	ts := startTLS(t, Config{Store: sqliteStore(t), TLSCert: certFile, TLSKey: keyFile})

	proto, err := ts.register(t, credentials.NewTLS(tlsClient(t, ca, nil)))
	if err != nil || proto != "h2" {
		t.Errorf("Register over TLS = ALPN %q, error %v; want h2 and no error", proto, err)
	}
	if _, err := ts.register(t, insecure.NewCredentials()); err == nil {
		t.Error("Register in plaintext to a TLS listener = nil error, want it refused")
	}
	other := tlstest.NewCA(t, "another CA")
	if _, err := ts.register(t, credentials.NewTLS(tlsClient(t, other, nil))); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("Register trusting another CA = %v, want a certificate error", err)
	}
	if got := ts.get(t, tlsClient(t, ca, nil), "/readyz"); got != http.StatusOK {
		t.Errorf("GET https /readyz = %d, want 200", got)
	}
	h2 := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsClient(t, ca, nil), ForceAttemptHTTP2: true}}
	if resp, err := h2.Get("https://" + ts.s.HTTPAddr() + "/healthz"); err != nil || resp.ProtoMajor != 2 {
		t.Errorf("GET /healthz offering h2 = %v, %v; want HTTP/2", resp, err)
	} else {
		resp.Body.Close()
	}
	resp, err := http.Get("http://" + ts.s.HTTPAddr() + "/readyz")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("GET http:// (plaintext) /readyz on the TLS listener = 200, want it refused")
		}
	}
	old := tls.Config{MaxVersion: tls.VersionTLS11}
	old.RootCAs = tlsClient(t, ca, nil).RootCAs
	old.ServerName = "repool.test"
	if got := ts.get(t, &old, "/readyz"); got != 0 {
		t.Errorf("GET /readyz with TLS 1.1 = %d, want the handshake refused", got)
	}
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "repool test CA")
	clients := tlstest.NewCA(t, "clients CA")
	certFile, keyFile := ca.Issue("server", "repool.test").Write(t, dir, "server")
	ts := startTLS(t, Config{Store: sqliteStore(t), TLSCert: certFile, TLSKey: keyFile, TLSClientCA: clients.WriteCA(dir, "clients.crt")})

	good := clients.Issue("sidecar-1")
	stranger := tlstest.NewCA(t, "stranger").Issue("sidecar-x")
	for _, tt := range []struct {
		name   string
		client *tlstest.Pair
		ok     bool
	}{
		{"no client certificate", nil, false},
		{"a certificate of another CA", &stranger, false},
		{"a certificate of the client CA", &good, true},
	} {
		_, err := ts.register(t, credentials.NewTLS(tlsClient(t, ca, tt.client)))
		if (err == nil) != tt.ok {
			t.Errorf("Register with %s = %v, want success %v", tt.name, err, tt.ok)
		}
		got := ts.get(t, tlsClient(t, ca, tt.client), "/readyz")
		if (got == http.StatusOK) != tt.ok {
			t.Errorf("GET /readyz with %s = %d, want success %v", tt.name, got, tt.ok)
		}
	}
}

// TestTLSReload: a new pair is served after ReloadTLS and after the files
// change on disk; a bad pair keeps the previous one.
func TestTLSReload(t *testing.T) {
	dir := t.TempDir()
	ca1, ca2, ca3 := tlstest.NewCA(t, "CA 1"), tlstest.NewCA(t, "CA 2"), tlstest.NewCA(t, "CA 3")
	certFile, keyFile := ca1.Issue("server", "repool.test").Write(t, dir, "server")
	ts := startTLS(t, Config{Store: sqliteStore(t), TLSCert: certFile, TLSKey: keyFile})
	trusts := func(ca *tlstest.CA) bool {
		_, err := ts.register(t, credentials.NewTLS(tlsClient(t, ca, nil)))
		return err == nil && ts.get(t, tlsClient(t, ca, nil), "/readyz") == http.StatusOK
	}
	if !trusts(ca1) {
		t.Fatal("the first pair is not served")
	}

	ca2.Issue("server", "repool.test").Write(t, dir, "server")
	if err := ts.s.ReloadTLS(); err != nil {
		t.Fatalf("ReloadTLS() with a good pair = %v", err)
	}
	if !trusts(ca2) || trusts(ca1) {
		t.Fatal("after ReloadTLS the listeners do not serve the new pair (only)")
	}

	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ts.s.ReloadTLS(); err == nil || !strings.Contains(err.Error(), keyFile) {
		t.Errorf("ReloadTLS() with a bad key = %v, want an error naming %s", err, keyFile)
	}
	if !trusts(ca2) {
		t.Fatal("a bad new key replaced the pair in use")
	}

	// Rotated in place, without a call: the watcher picks it up.
	ca3.Issue("server", "repool.test").Write(t, dir, "server")
	testenv.Eventually(t, 15*time.Second, "a pair rewritten on disk to be served", func() bool { return trusts(ca3) })
}

// TestTLSCertificateMissing: a certificate that cannot be loaded stops New,
// with the file named. (The TLS settings' loading is servercmd's
// TestTLSConfig.)
func TestTLSCertificateMissing(t *testing.T) {
	dir := t.TempDir()
	_, err := New(context.Background(), Config{Store: sqliteStore(t), GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		TLSCert: dir + "/missing.crt", TLSKey: dir + "/missing.key"}, Options{})
	if err == nil || !strings.Contains(err.Error(), "missing.crt") {
		t.Errorf("New() with a missing certificate = %v, want an error naming it", err)
	}
}
