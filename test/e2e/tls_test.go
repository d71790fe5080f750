package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/repool/repool/internal/testenv"
	"github.com/repool/repool/internal/tlsconf/tlstest"
)

// plaintextEnv runs the e2e test without TLS (REPOOL_E2E_PLAINTEXT=1): the
// comparison run for the failover figures and for the capture, which must
// then find the secrets. The default run has TLS on every hop.
const plaintextEnv = "REPOOL_E2E_PLAINTEXT"

// serverName is the name every server's certificate holds; HAProxy and
// the test's own clients verify it.
const serverName = "repool.internal"

// tlsFiles is the run's private CA and the files made from it.
type tlsFiles struct {
	ca     *tlstest.CA // nil: the CA deploy/make-certs made (TestRunbook)
	caPEM  []byte
	dir    string
	caFile string
	vipPEM string // HAProxy's crt on the VIP: certificate and key
	// client is the test's own gRPC clients' certificate, for servers
	// that ask for one (tls_client_ca, TestRunbook); none if empty.
	client []tls.Certificate
}

// useTLS reports whether this run has TLS on every hop.
func useTLS() bool { return os.Getenv(plaintextEnv) == "" }

// setupTLS makes the run's CA and the VIP's certificate, and has the
// test's probes trust the CA.
func (c *cluster) setupTLS() {
	c.tb.Helper()
	dir := filepath.Join(c.dir, "tls")
	if err := os.Mkdir(dir, 0o755); err != nil {
		c.tb.Fatal(err)
	}
	// Valid for longer than RepoolCertificateExpiresSoon's 14 days
	// (deploy/monitoring), which TestAlerts checks stays quiet.
	f := &tlsFiles{ca: tlstest.NewCAValid(c.tb, "repool e2e CA", time.Now().Add(-time.Hour), time.Now().Add(certValidity)), dir: dir}
	f.caFile = f.ca.WriteCA(dir, "ca.crt")
	f.caPEM = f.ca.PEM
	f.vipPEM = filepath.Join(dir, "vip.pem")
	if err := os.WriteFile(f.vipPEM, f.issue("vip", serverName, vipAddr).PEM(), 0o600); err != nil {
		c.tb.Fatal(err)
	}
	c.useTLS(f, nil)
}

// useTLS makes f the run's TLS files: the test's probes of the servers'
// HTTP ports trust its CA and show probeCert (if any) and speak HTTPS.
func (c *cluster) useTLS(f *tlsFiles, probeCert []tls.Certificate) {
	c.tls = f
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(f.caPEM)
	probe.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: pool, Certificates: probeCert}
	serverScheme = "https"
	c.tb.Cleanup(func() {
		serverScheme = "http"
		probe.Transport.(*http.Transport).TLSClientConfig = nil
	})
}

// certValidity is how long the run's certificates are valid: as long as a
// real deployment's, so that no certificate-expiry alert fires.
const certValidity = 90 * 24 * time.Hour

// issue signs a certificate valid for certValidity.
func (f *tlsFiles) issue(cn string, hosts ...string) tlstest.Pair {
	return f.ca.IssueValid(cn, time.Now().Add(-time.Hour), time.Now().Add(certValidity), hosts...)
}

// serverPair writes the certificate and key of server host h (its name
// and address) and returns their paths.
func (f *tlsFiles) serverPair(tb testing.TB, h host) (string, string) {
	return f.issue(h.name, serverName, h.addr).Write(tb, f.dir, h.name)
}

// creds are the credentials of the test's own gRPC clients: TLS verifying
// serverName with the run's CA, or plaintext.
func (c *cluster) creds() credentials.TransportCredentials {
	if c.tls == nil {
		return insecure.NewCredentials()
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.tls.caPEM)
	return credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: serverName, Certificates: c.tls.client})
}

// capture is tcpdump on the switch's ports of the LB and server hosts.
type capture struct {
	files []string
	procs []*proc
}

// capture starts tcpdump on the given hosts' switch ports, writing every
// packet whole and at once (-U) to a file per port.
func (c *cluster) capture(hosts ...host) *capture {
	c.tb.Helper()
	cp := &capture{}
	for _, h := range hosts {
		file := filepath.Join(c.dir, "capture-"+h.name+".pcap")
		// -Z root: tcpdump opens its output after dropping privileges, and
		// the run directory is root's.
		p := c.ps.start("tcpdump-"+h.name, switchNS, nil, "tcpdump", "-i", h.port(), "-n", "-s", "0", "-U", "--immediate-mode", "-Z", "root", "-w", file)
		cp.files, cp.procs = append(cp.files, file), append(cp.procs, p)
	}
	for _, f := range cp.files {
		testenv.Eventually(c.tb, 10*time.Second, "tcpdump to open "+f, func() bool { _, err := os.Stat(f); return err == nil })
	}
	return cp
}

// secret is a value that must not cross the LB and server links readable;
// header, when set, is the whole header value that carries it.
type secret struct{ name, value, header string }

// forms are the byte strings that give s away: its text, and the HPACK
// Huffman code of the header value that carries it (how HTTP/2 sends a
// header value; the last byte, padded, left out).
func (s secret) forms() [][]byte {
	out := [][]byte{[]byte(s.value)}
	if h := hpack.AppendHuffmanString(nil, s.header); len(h) > 1 {
		out = append(out, h[:len(h)-1])
	}
	return out
}

// check stops the captures and reports, per secret, the files it was seen
// in, and the bytes captured.
func (cp *capture) check(tb testing.TB, secrets []secret) (seen map[string][]string, total int64) {
	tb.Helper()
	// SIGTERM: tcpdump writes what it holds and exits.
	for _, p := range cp.procs {
		p.signal(syscall.SIGTERM)
	}
	for _, p := range cp.procs {
		testenv.Eventually(tb, 10*time.Second, "tcpdump to exit", p.exited)
	}
	seen = map[string][]string{}
	for _, f := range cp.files {
		raw, err := os.ReadFile(f)
		if err != nil {
			tb.Fatalf("read the capture %s: %v", f, err)
		}
		total += int64(len(raw))
		for _, s := range secrets {
			for _, form := range s.forms() {
				if bytes.Contains(raw, form) {
					seen[s.name] = append(seen[s.name], filepath.Base(f))
					break
				}
			}
		}
	}
	return seen, total
}

// checkCapture asserts what the captures hold: with TLS, none of the
// secrets and enough bytes to show traffic was captured; without, every
// secret (so the check can fail).
func (c *cluster) checkCapture(tb testing.TB, cp *capture, secrets []secret) {
	tb.Helper()
	seen, total := cp.check(tb, secrets)
	mode := "TLS"
	if c.tls == nil {
		mode = "plaintext"
	}
	tb.Logf("capture (%s) on the LB and server links: %d bytes in %d files; secrets seen: %v", mode, total, len(cp.files), seen)
	fmt.Printf("measure: capture_bytes=%d\n", total)
	fmt.Printf("measure: capture_secrets_seen=%d\n", len(seen))
	if total < 100<<10 {
		tb.Errorf("the captures hold %d bytes, want at least 100 KiB: the links' traffic was not captured", total)
	}
	for _, s := range secrets {
		switch files := seen[s.name]; {
		case c.tls != nil && len(files) > 0:
			tb.Errorf("%s found in the capture of %v with TLS on every hop", s.name, files)
		case c.tls == nil && len(files) == 0:
			tb.Errorf("%s not found in the plaintext capture: the capture check cannot see secrets", s.name)
		}
	}
}

// serverScheme is the scheme of the servers' HTTP ports.
var serverScheme = "http"

func (s *server) httpURL(path string) string {
	return serverScheme + "://" + s.host.addr + ":" + strconv.Itoa(httpPort) + path
}
