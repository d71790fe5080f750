package tlsconf

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/tlsconf/tlstest"
)

// dial makes one TLS connection over loopback between a server with srv
// and a client with cli, and returns the common name of the certificate
// the server presented and each side's handshake error.
func dial(t *testing.T, srv, cli *tls.Config) (served string, serverErr, clientErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen on 127.0.0.1:0 = got error %v, want nil", err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		conn := tls.Server(c, srv)
		err = conn.Handshake()
		if err == nil {
			// Under TLS 1.3 the server checks the client's certificate
			// after the client's handshake is over: a read is where the
			// client would hear of a refusal.
			_, err = conn.Write([]byte("ok"))
		}
		done <- err
	}()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second)
	if err != nil {
		t.Fatalf("dial %s = got error %v, want nil", ln.Addr(), err)
	}
	defer c.Close()
	cli = cli.Clone()
	cli.ServerName = "localhost"
	conn := tls.Client(c, cli)
	if clientErr = conn.Handshake(); clientErr == nil {
		if p := conn.ConnectionState().PeerCertificates; len(p) > 0 {
			served = p[0].Subject.CommonName
		}
		buf := make([]byte, 2)
		_, clientErr = conn.Read(buf)
	}
	c.Close()
	return served, <-done, clientErr
}

// pki is a CA, a server pair it issued, and the files of both.
type pki struct {
	ca                       *tlstest.CA
	dir, cert, key, clientCA string
}

func newPKI(t *testing.T) pki {
	t.Helper()
	p := pki{ca: tlstest.NewCA(t, "repool test CA"), dir: t.TempDir()}
	p.cert, p.key = p.ca.Issue("one", "localhost").Write(t, p.dir, "server")
	p.clientCA = p.ca.WriteCA(p.dir, "clients.pem")
	return p
}

// client returns a client configuration that trusts p's CA, with a client
// certificate from issuer when it is not nil.
func (p pki) client(t *testing.T, issuer *tlstest.CA) *tls.Config {
	t.Helper()
	c := Client{CAPEM: string(p.ca.PEM)}
	if issuer != nil {
		pair := issuer.Issue("client")
		c.CertPEM, c.KeyPEM = string(pair.Cert), string(pair.Key)
	}
	cfg, err := c.Config("test")
	if err != nil {
		t.Fatalf("Client.Config = got error %v, want nil", err)
	}
	return cfg
}

// TestNewServerRefusesBadFiles: missing, mismatched or empty files are
// refused with an error in our words that names the file.
func TestNewServerRefusesBadFiles(t *testing.T) {
	p := newPKI(t)
	other, otherKey := p.ca.Issue("other", "localhost").Write(t, p.dir, "other")
	garbage := filepath.Join(p.dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(p.dir, "missing.pem")
	tests := []struct {
		name  string
		files Files
		want  []string // in the error
	}{
		{"no files", Files{}, []string{"tls: no certificate configured"}},
		{"cert without key", Files{CertFile: p.cert}, []string{"tls_cert and tls_key go together"}},
		{"client CA without a pair", Files{ClientCAFile: p.clientCA}, []string{"tls_client_ca needs tls_cert and tls_key"}},
		{"missing certificate", Files{CertFile: missing, KeyFile: p.key}, []string{"tls: certificate", missing}},
		{"key of another certificate", Files{CertFile: p.cert, KeyFile: otherKey}, []string{"tls: certificate", p.cert, otherKey}},
		{"certificate is not PEM", Files{CertFile: garbage, KeyFile: p.key}, []string{"tls: certificate", garbage}},
		{"missing client CA", Files{CertFile: other, KeyFile: otherKey, ClientCAFile: missing}, []string{"tls: CA file", missing}},
		{"client CA is not PEM", Files{CertFile: other, KeyFile: otherKey, ClientCAFile: garbage}, []string{"tls: CA file", garbage, "holds no PEM certificate"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewServer(tt.files)
			if err == nil {
				t.Fatalf("NewServer(%+v) = got %v, nil, want an error", tt.files, s)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("NewServer(%+v) = got error %q, want it to say %q", tt.files, err, w)
				}
			}
		})
	}
}

// TestClientConfigRefusesBadMaterial: the client side's errors say which
// material is wrong.
func TestClientConfigRefusesBadMaterial(t *testing.T) {
	pair := tlstest.NewCA(t, "ca").Issue("client")
	tests := []struct {
		name   string
		client Client
		want   string
	}{
		{"CA not PEM", Client{CAPEM: "nonsense"}, "tls: CA file sidecar ca_file holds no PEM certificate"},
		{"cert without key", Client{CertPEM: string(pair.Cert)}, "tls: sidecar: cert_file and key_file go together"},
		{"key of no certificate", Client{CertPEM: string(pair.Key), KeyPEM: string(pair.Key)}, "tls: sidecar client certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.client.Config("sidecar"); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Client.Config = got error %v, want one saying %q", err, tt.want)
			}
		})
	}
}

// TestClientCAVerification: a server with a client CA serves clients
// whose certificates that CA signed, refuses those another CA signed, and
// a client with no certificate fails its own handshake saying so; a
// server without one serves any client.
func TestClientCAVerification(t *testing.T) {
	p := newPKI(t)
	stranger := tlstest.NewCA(t, "another CA")
	mtls, err := NewServer(Files{CertFile: p.cert, KeyFile: p.key, ClientCAFile: p.clientCA})
	if err != nil {
		t.Fatalf("NewServer = got error %v, want nil", err)
	}
	plain, err := NewServer(Files{CertFile: p.cert, KeyFile: p.key})
	if err != nil {
		t.Fatalf("NewServer = got error %v, want nil", err)
	}

	if served, srvErr, cliErr := dial(t, mtls.Config("h2"), p.client(t, p.ca)); srvErr != nil || cliErr != nil || served != "one" {
		t.Errorf("client signed by the client CA: served %q, server error %v, client error %v; want certificate one, no errors", served, srvErr, cliErr)
	}
	if _, srvErr, cliErr := dial(t, mtls.Config("h2"), p.client(t, stranger)); srvErr == nil || cliErr == nil {
		t.Errorf("client signed by another CA: server error %v, client error %v; want both sides to fail", srvErr, cliErr)
	}
	if _, _, cliErr := dial(t, mtls.Config("h2"), p.client(t, nil)); !errors.Is(cliErr, ErrNoClientCert) {
		t.Errorf("client with no certificate: client error %v, want ErrNoClientCert", cliErr)
	}
	if _, srvErr, cliErr := dial(t, plain.Config("h2"), p.client(t, nil)); srvErr != nil || cliErr != nil {
		t.Errorf("server without a client CA: server error %v, client error %v; want none", srvErr, cliErr)
	}
}

// TestWatchReloadsChangedFiles: at each check on its clock, Watch reloads
// files that changed and leaves unchanged ones alone; bad new files keep
// the material in use and are tried again while they keep changing; every
// listener's configuration serves what was loaded last.
func TestWatchReloadsChangedFiles(t *testing.T) {
	const interval = time.Minute
	p := newPKI(t)
	fake := clock.NewFake(time.Unix(1_800_000_000, 0))
	s, err := NewServer(Files{CertFile: p.cert, KeyFile: p.key, Clock: fake})
	if err != nil {
		t.Fatalf("NewServer = got error %v, want nil", err)
	}
	cfg := s.Config("h2")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	reports := make(chan error, 10)
	done := make(chan struct{})
	go func() { defer close(done); s.Watch(ctx, interval, func(err error) { reports <- err }) }()
	defer cancel()
	if err := fake.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// tick moves the clock past one check and returns the report of the
	// reload it made.
	tick := func(what string) error {
		t.Helper()
		fake.Advance(interval)
		select {
		case err := <-reports:
			return err
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no reload reported within 10s of a check", what)
			return nil
		}
	}
	serves := func(want string) {
		t.Helper()
		if served, srvErr, cliErr := dial(t, cfg, p.client(t, nil)); served != want {
			t.Fatalf("served certificate %q (server error %v, client error %v), want %q", served, srvErr, cliErr, want)
		}
	}
	// rewrite writes the files of a renewal, stamped with a modification
	// time of their own: a rewrite within the file system's timestamp
	// granularity with the same sizes would otherwise look unchanged.
	step := 0
	rewrite := func(cert, key []byte) {
		t.Helper()
		step++
		at := time.Unix(1_800_000_000+int64(step), 0)
		for path, b := range map[string][]byte{p.cert: cert, p.key: key} {
			if b == nil {
				continue
			}
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(path, at, at); err != nil {
				t.Fatal(err)
			}
		}
	}
	serves("one")

	two := p.ca.IssueValid("two", time.Now().Add(-time.Hour), time.Now().Add(48*time.Hour), "localhost")
	rewrite(two.Cert, two.Key)
	if err := tick("new pair"); err != nil {
		t.Fatalf("reload of a new pair = got error %v, want nil", err)
	}
	serves("two")
	if got, want := s.NotAfter().Unix(), time.Now().Add(48*time.Hour).Unix(); got < want-60 || got > want {
		t.Fatalf("NotAfter() = %v, want the new certificate's, about %v", s.NotAfter(), time.Unix(want, 0))
	}

	rewrite([]byte("half a certificate"), nil)
	if err := tick("bad pair"); err == nil || !strings.Contains(err.Error(), "tls: certificate "+p.cert) {
		t.Fatalf("reload of a bad certificate = got error %v, want one naming %s", err, p.cert)
	}
	serves("two")
	// A file still being written is tried again while it keeps changing.
	rewrite([]byte("half a certificate, and more"), nil)
	if err := tick("bad pair rewritten"); err == nil {
		t.Fatal("reload of a rewritten bad certificate = got nil, want an error")
	}
	serves("two")

	three := p.ca.Issue("three", "localhost")
	rewrite(three.Cert, three.Key)
	if err := tick("fixed pair"); err != nil {
		t.Fatalf("reload of the fixed pair = got error %v, want nil", err)
	}
	serves("three")

	// Checks of unchanged files reload nothing.
	for range 3 {
		fake.Advance(interval)
	}
	cancel()
	<-done
	if len(reports) != 0 {
		t.Fatalf("%d reloads reported beyond the four changes", len(reports))
	}
}
