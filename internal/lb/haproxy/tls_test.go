package haproxy_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/repool/repool/internal/lb/haproxy/haproxytest"
	"github.com/repool/repool/internal/tlsconf/tlstest"
)

// TestTLSThroughHAProxy runs the real HAProxy with TLS terminated on the
// VIP and re-encrypted to servers that require HAProxy's client
// certificate: the health checks over TLS still tell the active server
// (UP) from a standby (NOLB, 404) and a broken one (DOWN, 503), a server
// whose certificate does not verify is DOWN, and a call through the VIP
// over TLS (h2) reaches the active server. A restarted standby is NOLB
// again (its agent answers in plaintext on the TLS port).
func TestTLSThroughHAProxy(t *testing.T) {
	dir, err := os.MkdirTemp("", "repool-haproxy-tls-") // a clean path for the inventory
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ca, stranger := tlstest.NewCA(t, "repool CA"), tlstest.NewCA(t, "stranger CA")
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	serverCfg := func(signer *tlstest.CA) *tls.Config {
		p := signer.Issue("server", "repool.internal")
		cert, err := tls.X509KeyPair(p.Cert, p.Key)
		if err != nil {
			t.Fatal(err)
		}
		return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	}
	active := haproxytest.NewTLSServer(t, "active", http.StatusOK, serverCfg(ca))
	standby := haproxytest.NewTLSServer(t, "standby", http.StatusNotFound, serverCfg(ca))
	broken := haproxytest.NewTLSServer(t, "broken", http.StatusServiceUnavailable, serverCfg(ca))
	impostor := haproxytest.NewTLSServer(t, "impostor", http.StatusOK, serverCfg(stranger))

	inv := haproxytest.LoopbackInventory(t, dir, active, standby, broken, impostor)
	write := func(name string, content []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	inv.TLS.Cert = write("vip.pem", ca.Issue("vip", "repool.internal", "127.0.0.1").PEM())
	inv.TLS.ServerCA = write("ca.crt", ca.PEM)
	inv.TLS.ServerName = "repool.internal"
	inv.TLS.ClientCert = write("haproxy-client.pem", ca.Issue("haproxy").PEM())
	p := haproxytest.Start(t, inv, dir)
	haproxytest.WaitStatus(t, p.Runtime, map[string]string{"active": "UP", "standby": "NOLB", "broken": "DOWN", "impostor": "DOWN"})

	vip := "https://127.0.0.1:" + strconv.Itoa(inv.VIP.GRPCPort) + "/"
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "repool.internal"}, ForceAttemptHTTP2: true,
	}}
	resp, err := client.Get(vip)
	if err != nil {
		t.Fatalf("GET %s over TLS = %v, want an answer", vip, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "active" || resp.ProtoMajor != 2 {
		t.Errorf("GET through the VIP = %s %d %q, want HTTP/2 200 from the active server", resp.Proto, resp.StatusCode, body)
	}
	// The agent answers in plaintext on the TLS port: the standby is at
	// weight 0, and restarted it is NOLB again.
	standby.Stop()
	haproxytest.WaitStatus(t, p.Runtime, map[string]string{"standby": "DOWN"})
	standby.Start(t)
	haproxytest.WaitStatus(t, p.Runtime, map[string]string{"active": "UP", "standby": "NOLB", "broken": "DOWN", "impostor": "DOWN"})
	servers, err := p.Runtime.Servers()
	if err != nil {
		t.Fatalf("Servers() = got error %v, want nil", err)
	}
	for _, s := range servers {
		if s.Name == "standby" && s.Weight != 0 {
			t.Errorf("restarted standby over TLS = got weight %d, want 0 (its agent's)", s.Weight)
		}
	}
	plain := &http.Client{Timeout: 5 * time.Second}
	if resp, err := plain.Get("http://127.0.0.1:" + strconv.Itoa(inv.VIP.GRPCPort) + "/"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("a plaintext request to the TLS VIP = 200, want it refused")
		}
	}
}
