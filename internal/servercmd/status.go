package servercmd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/repool/repool/internal/cli"
	"github.com/repool/repool/internal/lb/inventory"
	"github.com/repool/repool/internal/status/gather"
)

const statusUsage = `usage: ` + Prog + ` status --inventory FILE [--token-file FILE] [--json] [flags]

Print the deployment's status as one table: each LB host of the inventory
(VRRP state, whether it holds the VIP, whether its HAProxy answers), each
server as it answers GET /status.json and as each LB host's HAProxy sees it
(UP, NOLB, DOWN and the check's status), per group the leader, its epoch
and since when, the standbys and whether they wait on the lock, each
server's version and configuration hash, the database (and, with the
inventory's database section, each node as its Patroni answers GET
/patroni) and the age of the last checkpoint; then what needs a look.
--json prints the same as JSON.

It reads, from where it runs: each server's HTTP port (https with the
inventory's tls section; a control-plane token of role metrics or
operator, from --token-file or REPOOL_TOKEN: ` + Prog + ` admin-token --role
metrics), each LB host's monitor port (HAProxy's /lb-health and its
exporter's /metrics) and its node exporter (the Keepalived state that
keepalived/notify.sh writes). It changes nothing. Exit status 0 once the
status is printed, whatever it says.
`

// status is "server status".
func status(ctx context.Context, args []string, env Env) error {
	fs := flag.NewFlagSet(Prog+" status", flag.ContinueOnError)
	fs.Usage = cli.Usage(fs, statusUsage)
	invPath := fs.String("inventory", "", "LB inventory `file` (required): the LB hosts, the servers and their ports")
	tokenFile := fs.String("token-file", "", "`file` holding a control-plane token of role metrics or operator (default: REPOOL_TOKEN)")
	caFile := fs.String("ca-file", "", "CA (PEM) that verifies the servers' certificates (default: the inventory's tls.server_ca)")
	serverName := fs.String("server-name", "", "name the servers' certificates hold (default: the inventory's tls.server_name)")
	certFile := fs.String("cert-file", "", "client certificate (PEM) for servers started with --tls-client-ca; may hold the key too")
	keyFile := fs.String("key-file", "", "its key (PEM), if not in --cert-file")
	nodePort := fs.Int("node-exporter-port", gather.DefaultNodeExporterPort, "port of the LB hosts' node exporter")
	timeout := fs.Duration("timeout", gather.DefaultTimeout, "bound on each request")
	asJSON := fs.Bool("json", false, "print JSON (for scripts) instead of the table")
	if err := cli.Parse(fs, env.Stdout, env.Stderr, func() error {
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return fmt.Errorf("unexpected arguments %q", fs.Args())
		}
		return nil
	}); err != nil {
		return err
	}
	switch {
	case *invPath == "":
		return errors.New("status: --inventory is required")
	case *nodePort < 1 || *nodePort > 65535:
		return fmt.Errorf("status: --node-exporter-port %d: want 1-65535", *nodePort)
	case *timeout <= 0:
		return fmt.Errorf("status: --timeout %v: want > 0", *timeout)
	case *keyFile != "" && *certFile == "":
		return errors.New("status: --key-file without --cert-file")
	}
	inv, err := inventory.Load(*invPath)
	if err != nil {
		return err
	}
	tok, err := statusToken(*tokenFile, env.Getenv)
	if err != nil {
		return err
	}
	cfg := gather.Config{Inventory: inv, Token: tok, NodeExporterPort: *nodePort, Timeout: *timeout,
		LB: &http.Client{Transport: &http.Transport{Proxy: nil}}}
	cfg.Servers = cfg.LB
	if inv.TLS.On() {
		tc, err := statusTLS(inv.TLS, *caFile, *serverName, *certFile, *keyFile)
		if err != nil {
			return err
		}
		cfg.Scheme, cfg.Servers = "https", &http.Client{Transport: &http.Transport{Proxy: nil, TLSClientConfig: tc}}
	}
	c, err := gather.Cluster(ctx, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(c)
	}
	return c.WriteTable(env.Stdout)
}

// statusToken reads the token from file, or REPOOL_TOKEN. None at all is
// an error: every server would answer 401.
func statusToken(file string, getenv func(string) string) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("status: --token-file: %w", err)
		}
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, nil
		}
		return "", fmt.Errorf("status: --token-file %s is empty", file)
	}
	if t := strings.TrimSpace(getenv("REPOOL_TOKEN")); t != "" {
		return t, nil
	}
	return "", errors.New("status: no token: give --token-file or REPOOL_TOKEN (a control-plane token of role metrics or operator: " + Prog + " admin-token --role metrics)")
}

// statusTLS is the client TLS configuration for the servers' HTTP ports.
func statusTLS(t inventory.TLS, caFile, serverName, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" {
		caFile = t.ServerCA
	}
	if serverName == "" {
		serverName = t.ServerName
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("status: the servers' CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("status: the servers' CA %s holds no PEM certificate", caFile)
	}
	tc := &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}
	if certFile != "" {
		if keyFile == "" {
			keyFile = certFile
		}
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("status: client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}
