// Package tlstest makes a private certificate authority for tests: a CA
// and certificates it signs, written as PEM files, made with crypto/x509.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a private certificate authority.
type CA struct {
	tb   testing.TB
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate, PEM-encoded.
	PEM []byte
}

// NewCA makes a CA named name, valid for a day.
func NewCA(tb testing.TB, name string) *CA {
	tb.Helper()
	return NewCAValid(tb, name, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
}

// NewCAValid is NewCA with a validity period of its own.
func NewCAValid(tb testing.TB, name string, notBefore, notAfter time.Time) *CA {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(tb),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return &CA{tb: tb, cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// WriteCA writes the CA certificate to dir/name and returns the path.
func (ca *CA) WriteCA(dir, name string) string {
	ca.tb.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, ca.PEM, 0o644); err != nil {
		ca.tb.Fatal(err)
	}
	return p
}

// Pair is a certificate and its key, PEM-encoded.
type Pair struct {
	Cert, Key []byte
}

// Issue signs a certificate for hosts (DNS names or IP addresses), usable
// by servers and clients alike, valid for a day.
func (ca *CA) Issue(cn string, hosts ...string) Pair {
	return ca.IssueValid(cn, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour), hosts...)
}

// IssueValid is Issue with a validity period of its own.
func (ca *CA) IssueValid(cn string, notBefore, notAfter time.Time, hosts ...string) Pair {
	ca.tb.Helper()
	key := newKey(ca.tb)
	tmpl := &x509.Certificate{
		SerialNumber: serial(ca.tb),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.tb.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		ca.tb.Fatal(err)
	}
	return Pair{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	}
}

// Write writes the pair to dir/name.crt and dir/name.key (mode 0600) and
// returns the paths.
func (p Pair) Write(tb testing.TB, dir, name string) (certFile, keyFile string) {
	tb.Helper()
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, p.Cert, 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(keyFile, p.Key, 0o600); err != nil {
		tb.Fatal(err)
	}
	return certFile, keyFile
}

// PEM returns the certificate followed by the key, as HAProxy reads a
// crt file.
func (p Pair) PEM() []byte { return append(append([]byte{}, p.Cert...), p.Key...) }

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return key
}

func serial(tb testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		tb.Fatal(err)
	}
	return n
}
