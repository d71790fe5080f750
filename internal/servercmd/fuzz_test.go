package servercmd

import (
	"bytes"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/repool/repool/internal/limits"
	"github.com/repool/repool/internal/server"
	"github.com/repool/repool/internal/testenv"
)

// fileValues renders c as the values of a configuration file, by YAML key.
func fileValues(c server.Config) map[string]string {
	d := func(v time.Duration) string { return v.String() }
	m := map[string]string{
		"grpc_addr": c.GRPCAddr, "http_addr": c.HTTPAddr, "store": c.Store,
		"checkpoint_interval": d(c.CheckpointInterval), "token_ttl": d(c.TokenTTL), "operator_token_ttl": d(c.OperatorTokenTTL),
		"global_resources": strconv.FormatInt(c.GlobalResources, 10), "global_cells": strconv.FormatInt(c.GlobalCells, 10),
		"shutdown_grace": d(c.ShutdownGrace), "ha": strconv.FormatBool(c.HA), "ha_name": c.HAName,
		"ha_session_timeout": d(c.HASessionTimeout), "ha_interval": d(c.HAInterval),
		"group": c.Group, "placement_interval": d(c.PlacementInterval),
		"gc_percent": strconv.Itoa(c.GCPercent), "memory_limit": strconv.FormatInt(c.MemoryLimit, 10),
		"log_level": c.LogLevel, "otlp_endpoint": c.OTLPEndpoint,
		"report_flush": d(c.ReportFlush), "store_probe_interval": d(c.StoreProbeInterval), "store_lock_wait": d(c.StoreLockWait), "durable_reports": strconv.FormatBool(c.DurableReports),
		"store_fsync": strconv.FormatBool(c.StoreFsync), "store_shared_files": strconv.FormatBool(c.StoreSharedFiles),
		"default_tenant_share": strconv.Itoa(c.DefaultTenantShare), "max_keys_per_tenant": strconv.Itoa(c.MaxKeysPerTenant),
		"http_read_header_timeout": d(c.HTTP.ReadHeaderTimeout), "http_read_timeout": d(c.HTTP.ReadTimeout),
		"http_write_timeout": d(c.HTTP.WriteTimeout), "http_idle_timeout": d(c.HTTP.IdleTimeout),
		"http_max_header_bytes": strconv.Itoa(c.HTTP.MaxHeaderBytes), "http_max_connections": strconv.Itoa(c.HTTP.MaxConnections),
		"grpc_max_connections": strconv.Itoa(c.GRPCMaxConnections), "grpc_max_concurrent_streams": strconv.Itoa(c.GRPCMaxConcurrentStreams),
		"grpc_max_connections_per_tenant": strconv.Itoa(c.GRPCMaxConnectionsPerTenant), "grpc_max_stream_idle": d(c.GRPCMaxStreamIdle),
		"grpc_max_recv_bytes": strconv.Itoa(c.GRPCMaxRecvBytes), "grpc_max_calls_per_tenant": strconv.Itoa(c.GRPCMaxCallsPerTenant),
		"grpc_max_unverified_calls": strconv.Itoa(c.GRPCMaxUnverifiedCalls),
		"grpc_stream_window":        strconv.Itoa(c.GRPCStreamWindow), "grpc_conn_window": strconv.Itoa(c.GRPCConnWindow),
		"grpc_max_connection_idle": d(c.GRPCMaxConnectionIdle), "grpc_handshake_timeout": d(c.GRPCHandshakeTimeout),
		"grpc_max_header_bytes": strconv.Itoa(c.GRPCMaxHeaderBytes), "grpc_keepalive_time": d(c.GRPCKeepaliveTime),
		"grpc_keepalive_timeout": d(c.GRPCKeepaliveTimeout), "grpc_keepalive_min_time": d(c.GRPCKeepaliveMinTime),
		"tls_cert": c.TLSCert, "tls_key": c.TLSKey, "tls_client_ca": c.TLSClientCA, "insecure": strconv.FormatBool(c.Insecure),
		"half_life": d(c.Policy.HalfLife), "quarantine_after": strconv.Itoa(c.Policy.FailuresToQuarantine),
		"quarantine_whole_after":  strconv.Itoa(c.Policy.FailuresToQuarantineWhole),
		"quarantine_below":        strconv.FormatFloat(c.Policy.QuarantineBelow, 'g', -1, 64),
		"quarantine_min_evidence": strconv.FormatFloat(c.Policy.QuarantineMinEvidence, 'g', -1, 64),
		"cooldown_base":           d(c.Policy.CooldownBase), "cooldown_max": d(c.Policy.CooldownMax),
		"audit_max_age": d(c.AuditMaxAge), "audit_max_rows_per_tenant": strconv.FormatInt(c.AuditMaxRowsPerTenant, 10),
		"revoked_key_max_age": d(c.RevokedKeyMaxAge), "retention_interval": d(c.RetentionInterval),
		"retention_batch": strconv.Itoa(c.RetentionBatch),
		"objective":       string(c.Policy.Objective),
		"max_uses":        strconv.Itoa(c.Policy.MaxUses), "max_age": d(c.Policy.MaxAge),
		"max_quarantined_share": strconv.FormatFloat(c.Policy.MaxQuarantinedShare, 'g', -1, 64),
	}
	for l := range limits.Count {
		if l.Flag() != "" {
			m[l.String()] = strconv.FormatFloat(c.Limits.Value(l), 'g', -1, 64)
		}
	}
	return m
}

// storePassword returns the password in the user info of the store URL of
// a configuration file, if the file holds it once.
func storePassword(doc []byte) string {
	var m map[string]string
	if yaml.Unmarshal(doc, &m) != nil {
		return ""
	}
	_, rest, ok := strings.Cut(m["store"], "://")
	host, _, _ := strings.Cut(rest, "/")
	at := strings.LastIndexByte(host, '@')
	if !ok || at < 0 {
		return ""
	}
	_, pw, _ := strings.Cut(host[:at], ":")
	if bytes.Count(doc, []byte(pw)) != 1 {
		return ""
	}
	return pw
}

// checkUsable fails t unless c is a configuration the server can run
// with: what Validate accepts must not fail later, at start.
func checkUsable(t *testing.T, c server.Config) {
	t.Helper()
	for name, d := range map[string]time.Duration{
		"checkpoint_interval": c.CheckpointInterval, "token_ttl": c.TokenTTL, "operator_token_ttl": c.OperatorTokenTTL,
		"ha_session_timeout": c.HASessionTimeout, "ha_interval": c.HAInterval, "report_flush": c.ReportFlush, "store_probe_interval": c.StoreProbeInterval, "store_lock_wait": c.StoreLockWait,
		"placement_interval": c.PlacementInterval, "retention_interval": c.RetentionInterval,
	} {
		if d <= 0 {
			t.Fatalf("Load() accepted %s %v, want it refused: it must be positive", name, d)
		}
	}
	switch r := c.Limits.Value(limits.RatePerSecond); {
	case math.IsNaN(r) || math.IsInf(r, 0) || r <= 0:
		t.Fatalf("Load() accepted rate_per_second %v, want it refused: it must be finite and positive", r)
	case c.Limits.Value(limits.Burst) < 1 || c.GlobalResources < 1 || c.GlobalCells < 1 || c.ShutdownGrace < 0 || c.MemoryLimit < 0:
		t.Fatalf("Load() accepted %+v, want counts and limits in range", c)
	}
	for l := range limits.Count {
		s := l.Spec()
		v, set := c.Limits.Get(l)
		switch {
		case l.Flag() == "" && set:
			t.Fatalf("Load() set %s %v, which has no flag", l, v)
		case l.Flag() != "" && (v < s.Min || v > s.Max || s.Integer && v != math.Trunc(v)):
			t.Fatalf("Load() accepted %s %v, want it refused: out of its range", l, v)
		}
	}
}

// FuzzLoadConfig feeds arbitrary configuration files to Load (which
// applies defaults and validates). No error quotes the password of the
// store URL. An accepted configuration is one the server can run with
// (every interval positive, the rate finite), and written back as a file
// it loads again to the same configuration (parse, render, parse). No
// input takes longer than testenv.FuzzBound.
func FuzzLoadConfig(f *testing.F) {
	def := server.Config{}.WithDefaults()
	var keys []string
	for _, b := range bindings() {
		keys = append(keys, strings.ReplaceAll(b.name, "-", "_"))
	}
	if vals := fileValues(def); len(vals) != len(keys) {
		f.Fatalf("fileValues renders %d keys, want one per binding: %v", len(vals), keys)
	}
	full, err := yaml.Marshal(fileValues(def))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(full)
	for _, doc := range []string{
		"burst: 70\ncheckpoint_interval: 3s\nrate_per_second: 5\n", "", "# nothing set yet\n# burst: 70\n",
		"log_level: debug\n", "log_level: verbose\n", "store: sqlite:/from/file.db\nburst: 70\n",
		"store: postgres://repool:s3cret-passw0rd@db.internal:5432/repool?sslmode=disable\nha: true\nha_name: a\n",
		"store: postgres://repool:s3cret-passw0rd@db.internal/repool\nha: true\nha_interval: 1s\nha_session_timeout: 5s\n",
		"store: mysql://x\n", "gc_percent: -1\nmemory_limit: 2GiB\n", "gc_percent: -1\n", "memory_limit: 1MiB\n",
		"memory_limit: 9999999999TiB\n", "token_ttl: soon\n", "grpc_addr: nowhere\n", "unknown_key: 1\n",
		"burst: [1, 2]\n", "burst: 1\nburst: 2\n",
		"grpc_addr: 10.0.0.1:9090\n", "grpc_addr: 10.0.0.1:9090\ninsecure: true\n", "tls_cert: /etc/repool/tls/server.crt\n",
		"tls_cert: a.crt\ntls_key: a.key\ntls_client_ca: ca.crt\nhttp_addr: 0.0.0.0:8081\n", "- a\n- b\n", "a: &a [*a, *a]\n",
	} {
		f.Add([]byte(doc))
	}
	path := filepath.Join(f.TempDir(), "server.yaml")
	load := func(doc []byte) (server.Config, error) {
		if err := os.WriteFile(path, doc, 0o600); err != nil {
			return server.Config{}, err
		}
		fs := flag.NewFlagSet("server", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		return Load(fs, []string{"--config", path}, func(string) string { return "" })
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		var c server.Config
		var err error
		testenv.Timed(t, "Load", func() { c, err = load(doc) })
		if err != nil {
			testenv.NoSecret(t, "Load error", err.Error(), storePassword(doc))
			return
		}
		checkUsable(t, c)
		raw, err := yaml.Marshal(fileValues(c))
		if err != nil {
			t.Fatalf("yaml.Marshal(rendered configuration) = %v", err)
		}
		again, err := load(raw)
		if err != nil {
			t.Fatalf("Load(render(Load(doc))) = %v, want the configuration again; rendered:\n%s", err, raw)
		}
		if !reflect.DeepEqual(again, c) { // Limits holds pointers: their values are compared
			t.Fatalf("Load(render(Load(doc))) = %+v, want %+v; rendered:\n%s", again, c, raw)
		}
	})
}
