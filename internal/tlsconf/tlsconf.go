// Package tlsconf is repool's TLS material: the server side (a certificate
// pair and an optional client CA, re-read on demand or when the files
// change, a bad new pair keeping the old one) and the client side (a CA to
// verify the server with, a server name, an optional client certificate).
// Both require TLS 1.2 or later.
package tlsconf

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/repool/repool/internal/clock"
)

// Files names a server's TLS material: CertFile and KeyFile (PEM) are its
// certificate chain and key; ClientCAFile, when set, is the CA (PEM,
// one or more certificates) that clients' certificates must be signed by
// (mutual TLS). Clock paces Server.Watch's checks of the files; nil means
// the wall clock.
type Files struct {
	CertFile, KeyFile, ClientCAFile string
	Clock                           clock.Clock
}

// Enabled reports whether f asks for TLS.
func (f Files) Enabled() bool { return f.CertFile != "" || f.KeyFile != "" || f.ClientCAFile != "" }

// Validate checks that f is complete: both of CertFile and KeyFile or
// neither, and ClientCAFile only with them. prefix is put before the key
// names (for example "tls_").
func (f Files) Validate(prefix string) error {
	switch {
	case (f.CertFile == "") != (f.KeyFile == ""):
		return fmt.Errorf("%scert and %skey go together: set both or neither", prefix, prefix)
	case f.ClientCAFile != "" && f.CertFile == "":
		return fmt.Errorf("%sclient_ca needs %scert and %skey (a server checks clients' certificates only over TLS)", prefix, prefix, prefix)
	}
	return nil
}

// material is one loaded generation of a server's files.
type material struct {
	cert       tls.Certificate
	clients    *x509.CertPool // nil: no client certificates asked for
	notAfter   time.Time
	caNotAfter time.Time // the earliest NotAfter among clients' CAs
	stamp      string    // the files' sizes and modification times
}

// Server serves a certificate pair that it can re-read. Make one with
// NewServer; it is safe for concurrent use.
type Server struct {
	files Files
	mu    sync.Mutex // serialises reloads
	cur   atomic.Pointer[material]
	// listeners are the configurations handed out by Config, rebuilt at
	// every reload.
	listeners []*listener
}

type listener struct {
	protos []string
	cur    atomic.Pointer[tls.Config]
}

// NewServer loads f (which must be Enabled and valid).
func NewServer(f Files) (*Server, error) {
	if err := f.Validate("tls_"); err != nil {
		return nil, err
	}
	if f.CertFile == "" {
		return nil, errors.New("tls: no certificate configured")
	}
	if f.Clock == nil {
		f.Clock = clock.Real{}
	}
	s := &Server{files: f}
	m, err := load(f)
	if err != nil {
		return nil, err
	}
	s.cur.Store(m)
	return s, nil
}

// stamp fingerprints the files by size and modification time, "" if one
// cannot be read.
func (f Files) stamp() string {
	var out string
	for _, p := range []string{f.CertFile, f.KeyFile, f.ClientCAFile} {
		if p == "" {
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			return ""
		}
		out += fmt.Sprintf("%s:%d:%d;", p, fi.Size(), fi.ModTime().UnixNano())
	}
	return out
}

func load(f Files) (*material, error) {
	stamp := f.stamp()
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: certificate %s and key %s: %w", f.CertFile, f.KeyFile, err)
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tls: certificate %s: %w", f.CertFile, err)
		}
	}
	m := &material{cert: cert, notAfter: leaf.NotAfter, stamp: stamp}
	if f.ClientCAFile != "" {
		if m.clients, err = LoadPool(f.ClientCAFile); err != nil {
			return nil, err
		}
		if m.caNotAfter, err = earliestExpiryFile(f.ClientCAFile); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// LoadPool reads a PEM file of one or more CA certificates.
func LoadPool(path string) (*x509.CertPool, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tls: CA file: %w", err)
	}
	return PoolFromPEM(path, raw)
}

// PoolFromPEM parses PEM CA certificates; name says where they came from.
func PoolFromPEM(name string, raw []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw) {
		return nil, fmt.Errorf("tls: CA file %s holds no PEM certificate", name)
	}
	return pool, nil
}

// build makes the configuration served to clients of one listener.
func (m *material) build(protos []string) *tls.Config {
	c := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{m.cert},
		NextProtos:   protos,
	}
	if m.clients != nil {
		c.ClientCAs = m.clients
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c
}

// Config returns the configuration of one listener that offers protos by
// ALPN ("h2" for gRPC; "h2", "http/1.1" for HTTP). Every handshake uses the
// material of the latest successful load.
func (s *Server) Config(protos ...string) *tls.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := &listener{protos: protos}
	l.cur.Store(s.cur.Load().build(protos))
	s.listeners = append(s.listeners, l)
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: protos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return l.cur.Load(), nil
		},
	}
}

// Reload re-reads the files. On an error the material in use stays, and
// the error says what is wrong with the new one.
func (s *Server) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := load(s.files)
	if err != nil {
		return err
	}
	s.cur.Store(m)
	for _, l := range s.listeners {
		l.cur.Store(m.build(l.protos))
	}
	return nil
}

// NotAfter returns when the certificate in use expires.
func (s *Server) NotAfter() time.Time { return s.cur.Load().notAfter }

// Watch checks the files every interval until ctx ends and reloads them
// once they changed (size or modification time); report is told the
// outcome of each reload (nil: the new material is in use). A file being
// rewritten is retried at the next check while its stamp keeps changing.
func (s *Server) Watch(ctx context.Context, interval time.Duration, report func(error)) {
	tried := s.cur.Load().stamp
	clock.Every(ctx, s.files.Clock, interval, func(context.Context) bool {
		if st := s.files.stamp(); st != "" && st != tried {
			tried = st
			report(s.Reload())
		}
		return true
	})
}

// ErrNoClientCert fails a client's handshake with a server that asks for a
// client certificate when none is configured.
var ErrNoClientCert = errors.New("tls: the server requires a client certificate (mutual TLS) and none is configured (cert_file, key_file)")

// Client is the client side: the CA that the server's certificate must be
// signed by (PEM; empty: the system's roots), the name to verify it for
// (empty: the host of the address dialled), and a client certificate and
// key (PEM) for mutual TLS.
type Client struct {
	CAPEM, ServerName, CertPEM, KeyPEM string
}

// Config returns the client configuration; name says where the material
// came from, for errors.
func (c Client) Config(name string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAPEM != "" {
		pool, err := PoolFromPEM(name+" ca_file", []byte(c.CAPEM))
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if (c.CertPEM == "") != (c.KeyPEM == "") {
		return nil, fmt.Errorf("tls: %s: cert_file and key_file go together", name)
	}
	if c.CertPEM != "" {
		cert, err := tls.X509KeyPair([]byte(c.CertPEM), []byte(c.KeyPEM))
		if err != nil {
			return nil, fmt.Errorf("tls: %s client certificate: %w", name, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	} else {
		// Fail the handshake here, with what is missing, rather than send
		// no certificate: under TLS 1.3 the server's refusal arrives only
		// after the handshake, as a broken connection that looks
		// transient.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return nil, ErrNoClientCert
		}
	}
	return cfg, nil
}

// IsLoopback reports whether host (a name or an address, without a port)
// is this machine only: localhost, 127.0.0.0/8 or ::1. An empty host (all
// addresses) is not.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
