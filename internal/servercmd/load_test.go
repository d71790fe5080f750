package servercmd

import (
	"github.com/repool/repool/internal/limits"
	"github.com/repool/repool/internal/server"

	"errors"
	"flag"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestLoad(t *testing.T) {
	file := writeFile(t, t.TempDir(), "server.yaml", "burst: 70\ncheckpoint_interval: 3s\nrate_per_second: 5\n")
	empty := writeFile(t, t.TempDir(), "empty.yaml", "")
	comments := writeFile(t, t.TempDir(), "comments.yaml", "# nothing set yet\n# burst: 70\n")
	logFile := writeFile(t, t.TempDir(), "log.yaml", "log_level: debug\n")
	badLogFile := writeFile(t, t.TempDir(), "badlog.yaml", "log_level: verbose\n")
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(server.Config) bool
		wantErr bool
	}{
		{"defaults", nil, nil, func(c server.Config) bool {
			return c.GRPCAddr == "127.0.0.1:9090" && c.Limits.Value(limits.Burst) == 50 && !c.HA
		}, false},
		{"bare --ha switch", []string{"--ha", "--store", "postgres://x@127.0.0.1/db"}, nil, func(c server.Config) bool { return c.HA && c.Store == "postgres://x@127.0.0.1/db" }, false},
		{"--ha without postgres", []string{"--ha"}, nil, nil, true},
		{"file, env and flags in order", []string{"--config", file, "--burst", "90"}, map[string]string{"REPOOL_RATE_PER_SECOND": "7"},
			func(c server.Config) bool {
				return c.Limits.Value(limits.Burst) == 90 && c.Limits.Value(limits.RatePerSecond) == 7 && c.CheckpointInterval == 3*time.Second
			}, false},
		{"bad duration", []string{"--token-ttl", "soon"}, nil, nil, true},
		{"gc defaults", nil, nil, func(c server.Config) bool { return c.GCPercent == 400 && c.MemoryLimit == 0 }, false},
		{"memory limit with a unit", []string{"--memory-limit", "512MiB", "--gc-percent", "200"}, nil,
			func(c server.Config) bool { return c.MemoryLimit == 512<<20 && c.GCPercent == 200 }, false},
		{"memory limit from env in bytes", nil, map[string]string{"REPOOL_MEMORY_LIMIT": "1073741824"}, func(c server.Config) bool { return c.MemoryLimit == 1<<30 }, false},
		{"gc off with a limit", []string{"--gc-percent", "-1", "--memory-limit", "2GiB"}, nil, func(c server.Config) bool { return c.GCPercent == -1 }, false},
		{"gc off without a limit", []string{"--gc-percent", "-1"}, nil, nil, true},
		{"gc percent too low", []string{"--gc-percent", "5"}, nil, nil, true},
		{"memory limit too small", []string{"--memory-limit", "1MiB"}, nil, nil, true},
		{"memory limit unknown unit", []string{"--memory-limit", "2GB"}, nil, nil, true},
		{"memory limit negative", []string{"--memory-limit", "-5"}, nil, nil, true},
		{"memory limit overflow", []string{"--memory-limit", "9999999999TiB"}, nil, nil, true},
		{"stray argument", []string{"extra"}, nil, nil, true},
		{"rate NaN", []string{"--rate-per-second", "NaN"}, nil, nil, true},
		{"rate infinite", []string{"--rate-per-second", "+Inf"}, nil, nil, true},
		{"negative ha interval", []string{"--ha-interval", "-1s"}, nil, nil, true},
		{"negative ha timeouts", []string{"--ha-interval", "-3s", "--ha-session-timeout", "-1s"}, nil, nil, true},
		{"store password not shown", []string{"--store", "postgress://u:pw-in-the-url@h/db"}, nil, nil, true},
		{"empty file", []string{"--config", empty}, nil, func(c server.Config) bool { return reflect.DeepEqual(c, server.Config{}.WithDefaults()) }, false},
		{"comment-only file", nil, map[string]string{"REPOOL_CONFIG": comments}, func(c server.Config) bool { return reflect.DeepEqual(c, server.Config{}.WithDefaults()) }, false},
		{"log level default", nil, nil, func(c server.Config) bool { return c.LogLevel == "info" }, false},
		{"log level in a file", []string{"--config", logFile}, nil, func(c server.Config) bool { return c.LogLevel == "debug" }, false},
		{"log level env over file", []string{"--config", logFile}, map[string]string{"REPOOL_LOG_LEVEL": "warn"}, func(c server.Config) bool { return c.LogLevel == "warn" }, false},
		{"log level flag", []string{"--log-level", "error"}, nil, func(c server.Config) bool { return c.LogLevel == "error" }, false},
		{"log level unknown in a file", []string{"--config", badLogFile}, nil, nil, true},
		{"log level unknown flag", []string{"--log-level", "verbose"}, nil, nil, true},
		{"bare --ha then more flags", []string{"--ha", "--burst", "3", "--store", "postgres://x@127.0.0.1/db"}, nil, func(c server.Config) bool { return c.HA && c.Limits.Value(limits.Burst) == 3 }, false},
		{"--ha=false", []string{"--ha=false"}, nil, func(c server.Config) bool { return !c.HA }, false},
		{"listener defaults", nil, nil, func(c server.Config) bool {
			h := c.HTTP
			return h.ReadHeaderTimeout == 10*time.Second && h.ReadTimeout == 30*time.Second && h.WriteTimeout == 30*time.Second &&
				h.IdleTimeout == 2*time.Minute && h.MaxHeaderBytes == 64<<10 && h.MaxConnections == 1024 &&
				c.GRPCMaxConnections == 4096 && c.GRPCMaxConcurrentStreams == 256 && c.GRPCMaxConnectionIdle == 5*time.Minute &&
				c.GRPCHandshakeTimeout == 10*time.Second && c.GRPCMaxHeaderBytes == 64<<10 &&
				c.GRPCKeepaliveTime == time.Minute && c.GRPCKeepaliveTimeout == 20*time.Second && c.GRPCKeepaliveMinTime == 10*time.Second
		}, false},
		{"listener settings from flag, env and file", []string{"--config", writeFile(t, t.TempDir(), "listen.yaml", "grpc_max_connections: 10\nhttp_idle_timeout: 5s\n"), "--http-max-connections", "3"},
			map[string]string{"REPOOL_GRPC_MAX_CONCURRENT_STREAMS": "7"}, func(c server.Config) bool {
				return c.GRPCMaxConnections == 10 && c.HTTP.IdleTimeout == 5*time.Second && c.HTTP.MaxConnections == 3 && c.GRPCMaxConcurrentStreams == 7
			}, false},
		{"read timeout below the header timeout", []string{"--http-read-timeout", "1s"}, nil, nil, true},
		{"no connections", []string{"--grpc-max-connections", "-1"}, nil, nil, true},
		{"tiny header limit", []string{"--http-max-header-bytes", "10"}, nil, nil, true},
		{"governance defaults", nil, nil, func(c server.Config) bool { return c.DefaultTenantShare == 25 && c.MaxKeysPerTenant == 100 }, false},
		{"share above 100%", []string{"--default-tenant-share", "101"}, nil, nil, true},
		{"streams beyond the range", []string{"--max-streams", "1001"}, nil, nil, true},
		{"no keys", []string{"--max-keys-per-tenant", "-1"}, nil, nil, true},
		{"retention defaults", nil, nil, func(c server.Config) bool {
			p := c.Retention()
			return c.AuditMaxAge == 30*24*time.Hour && c.AuditMaxRowsPerTenant == 100_000 && c.RevokedKeyMaxAge == 30*24*time.Hour &&
				c.RetentionInterval == time.Minute && c.RetentionBatch == 1000 &&
				p.AuditMaxAge == c.AuditMaxAge && p.AuditMaxRows == 100_000 && p.RevokedKeyMaxAge == c.RevokedKeyMaxAge && p.Batch == 1000
		}, false},
		{"retention off", []string{"--audit-max-age", "off", "--audit-max-rows-per-tenant", "off"}, map[string]string{"REPOOL_REVOKED_KEY_MAX_AGE": "off"},
			func(c server.Config) bool {
				p := c.Retention()
				return c.AuditMaxAge < 0 && c.AuditMaxRowsPerTenant < 0 && c.RevokedKeyMaxAge < 0 && p.AuditMaxAge == 0 && p.AuditMaxRows == 0 && p.RevokedKeyMaxAge == 0
			}, false},
		{"retention from a file", []string{"--config", writeFile(t, t.TempDir(), "ret.yaml", "audit_max_age: 168h\naudit_max_rows_per_tenant: off\nretention_batch: 500\n")}, nil,
			func(c server.Config) bool {
				return c.AuditMaxAge == 168*time.Hour && c.AuditMaxRowsPerTenant < 0 && c.RetentionBatch == 500
			}, false},
		{"audit age below a second", []string{"--audit-max-age", "10ms"}, nil, nil, true},
		{"audit rows not a number", []string{"--audit-max-rows-per-tenant", "lots"}, nil, nil, true},
		{"retention batch too big", []string{"--retention-batch", "10001"}, nil, nil, true},
		{"retention interval too short", []string{"--retention-interval", "100ms"}, nil, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("server", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			cfg, err := Load(fs, tt.args, func(k string) string { return tt.env[k] })
			if (err != nil) != tt.wantErr {
				t.Fatalf("Load(%v) = %+v, %v; want error %v", tt.args, cfg, err, tt.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "pw-in-the-url") {
				t.Fatalf("Load(%v) = %v, which shows the store's password", tt.args, err)
			}
			if err == nil && !tt.check(cfg) {
				t.Fatalf("Load(%v) = %+v", tt.args, cfg)
			}
		})
	}
}

// TestLoadFileErrors: a file that does not parse, or holds a key or value
// that is not allowed, is refused naming the file and the line or key.
func TestLoadFileErrors(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"syntax error on line 2", "burst: 70\n- store: sqlite:x.db\n", "yaml: line 2: did not find expected key"},
		{"flow mapping opened on line 3", "burst: 70\nstore: sqlite:x.db\nha_name: {a\n", "yaml: line 3: did not find expected ',' or '}'"},
		{"tab on line 2", "burst: 70\n\tstore: x\n", "yaml: line 2: found a tab character"},
		{"unknown key", "burst: 70\nbursts: 3\n", `unknown key "bursts"`},
		{"bad value", "burst: many\n", "burst: strconv.Atoi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "server.yaml", tt.text)
			fs := flag.NewFlagSet("server", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			_, err := Load(fs, []string{"--config", path}, func(string) string { return "" })
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Load(--config %s) = got error %v, want one naming the file and containing %q", path, err, tt.want)
			}
		})
	}
}

// TestLoadUsage: -h names every flag's value (a back-quoted word in its
// usage) instead of the flag package's "value" or "string", and shows the
// switches (--ha, --durable-reports, --store-shared-files) bare.
func TestLoadUsage(t *testing.T) {
	var out strings.Builder
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(&out)
	if _, err := Load(fs, []string{"-h"}, func(string) string { return "" }); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("Load(-h) = got error %v, want flag.ErrHelp", err)
	}
	fs.VisitAll(func(f *flag.Flag) {
		name, _ := flag.UnquoteUsage(f)
		switch {
		case switches[f.Name] && name != "":
			t.Errorf("-h shows -%s %s, want the bare switch", f.Name, name)
		case !switches[f.Name] && (name == "" || name == "value" || name == "string"):
			t.Errorf("-h shows -%s %q, want a name for its value", f.Name, name)
		}
	})
	if !strings.Contains(out.String(), "-burst n\n") {
		t.Errorf("-h = %s, want a line \"-burst n\"", out.String())
	}
}

// TestLoadStore: admin-token finds the store the way Load does.
func TestLoadStore(t *testing.T) {
	file := writeFile(t, t.TempDir(), "server.yaml", "store: sqlite:/from/file.db\nburst: 70\n")
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    string
		wantErr bool
	}{
		{"default", nil, nil, server.Config{}.WithDefaults().Store, false},
		{"file", []string{"--config", file}, nil, "sqlite:/from/file.db", false},
		{"file from env", nil, map[string]string{"REPOOL_CONFIG": file}, "sqlite:/from/file.db", false},
		{"env over file", []string{"--config", file}, map[string]string{"REPOOL_STORE": "sqlite:/from/env.db"}, "sqlite:/from/env.db", false},
		{"flag over env", []string{"--store", "sqlite:/from/flag.db"}, map[string]string{"REPOOL_STORE": "sqlite:/from/env.db"}, "sqlite:/from/flag.db", false},
		{"other fields' env ignored", nil, map[string]string{"REPOOL_BURST": "many"}, server.Config{}.WithDefaults().Store, false},
		{"unknown scheme", []string{"--store", "mysql://x"}, nil, "", true},
		{"server flag", []string{"--burst", "3"}, nil, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("admin-token", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			got, err := LoadStore(fs, tt.args, func(k string) string { return tt.env[k] })
			if (err != nil) != tt.wantErr || (!tt.wantErr && got != tt.want) {
				t.Fatalf("LoadStore(%v) = %q, %v; want %q, error %v", tt.args, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestTLSConfig(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want string // "" for accepted
	}{
		{"loopback plaintext", []string{"--grpc-addr", "127.0.0.1:9090", "--http-addr", "localhost:8081"}, ""},
		{"non-loopback gRPC plaintext", []string{"--grpc-addr", "10.0.0.21:9090"}, `grpc_addr "10.0.0.21:9090" is not a loopback address and TLS is off`},
		{"all addresses HTTP plaintext", []string{"--http-addr", ":8081"}, `http_addr ":8081" is not a loopback address`},
		{"both ways out named", []string{"--http-addr", "0.0.0.0:8081"}, "set tls_cert and tls_key (--tls-cert, --tls-key), or insecure: true (--insecure)"},
		{"insecure allows it", []string{"--grpc-addr", "10.0.0.21:9090", "--insecure"}, ""},
		{"TLS allows it", []string{"--grpc-addr", "10.0.0.21:9090", "--tls-cert", "a.crt", "--tls-key", "a.key"}, ""},
		{"cert without key", []string{"--tls-cert", "a.crt"}, "tls_cert and tls_key go together"},
		{"client CA without cert", []string{"--tls-client-ca", "ca.crt"}, "tls_client_ca needs tls_cert and tls_key"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("server", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			_, err := Load(fs, tt.args, func(string) string { return "" })
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Load(%q) = %v, want %q", tt.args, err, tt.want)
			}
		})
	}
	env := map[string]string{"REPOOL_TLS_CERT": "e.crt", "REPOOL_TLS_KEY": "e.key", "REPOOL_TLS_CLIENT_CA": "e-ca.crt", "REPOOL_INSECURE": "true"}
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	c, err := Load(fs, nil, func(k string) string { return env[k] })
	if err != nil || c.TLSCert != "e.crt" || c.TLSKey != "e.key" || c.TLSClientCA != "e-ca.crt" || !c.Insecure {
		t.Errorf("Load from REPOOL_TLS_* = %+v, %v", c.TLSFiles(), err)
	}
}

// TestLimitFlags is what catches a limit of the table (internal/limits)
// whose server default cannot be set: each limit with a flag has it
// (--max-lease-streams), its REPOOL_ variable and its YAML key
// (max_lease_streams), each of which sets the limit's default in
// Config.Limits, with the table's default in -h; a value out of the
// limit's range is refused naming it, and 0 is 0, not the default. A
// limit without a flag has none.
func TestLimitFlags(t *testing.T) {
	load := func(t *testing.T, args []string, env map[string]string) (server.Config, error) {
		fs := flag.NewFlagSet("server", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		return Load(fs, args, func(k string) string { return env[k] })
	}
	for l := range limits.Count {
		t.Run(l.String(), func(t *testing.T) {
			s := l.Spec()
			if l.Flag() == "" {
				if _, err := load(t, []string{"--" + strings.ReplaceAll(l.String(), "_", "-"), "1"}, nil); err == nil {
					t.Errorf("a flag for %s, which has no server default to set", l)
				}
				return
			}
			fs := flag.NewFlagSet("server", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			if _, err := Load(fs, nil, func(string) string { return "" }); err != nil {
				t.Fatal(err)
			}
			if f := fs.Lookup(l.Flag()); f == nil || f.DefValue != strconv.FormatFloat(s.Default, 'g', -1, 64) {
				t.Fatalf("flag --%s = %+v, want one with the default %v", l.Flag(), f, s.Default)
			}
			v := s.Default + 1 // a value of its own, within range
			if !s.Integer {
				v = s.Default + 0.5
			}
			text := strconv.FormatFloat(v, 'g', -1, 64)
			path := writeFile(t, t.TempDir(), "server.yaml", l.String()+": "+text+"\n")
			for _, src := range []struct {
				name string
				args []string
				env  map[string]string
			}{
				{"flag", []string{"--" + l.Flag(), text}, nil},
				{"env", nil, map[string]string{envName(l.Flag()): text}},
				{"file", []string{"--config", path}, nil},
			} {
				c, err := load(t, src.args, src.env)
				if err != nil || c.Limits.Value(l) != v {
					t.Errorf("%s %s %s = Limits[%s] %v, %v; want %v", src.name, l, text, l, c.Limits.Value(l), err, v)
				}
				if rules := c.LimitRules(); rules.Defaults.Values.Value(l) != v {
					t.Errorf("%s %s %s: LimitRules default %v, want %v", src.name, l, text, rules.Defaults.Values.Value(l), v)
				}
			}
			beyond := strconv.FormatFloat(s.Max+1, 'f', -1, 64)
			if _, err := load(t, []string{"--" + l.Flag(), beyond}, nil); err == nil || !strings.Contains(err.Error(), l.String()+" "+beyond) {
				t.Errorf("--%s %s = %v, want an error naming %s %s", l.Flag(), beyond, err, l, beyond)
			}
			// 0 is 0, never "unset": a limit whose default may be 0
			// gets 0 (--max-lease-streams 0 allows no stream, as -h
			// says), one whose default must be above 0 is refused.
			c, err := load(t, []string{"--" + l.Flag(), "0"}, nil)
			switch {
			case s.DefaultAboveZero && (err == nil || !strings.Contains(err.Error(), l.String()+" 0: want more than 0")):
				t.Errorf("--%s 0 = %v, want it refused: a default of 0 would refuse every call", l.Flag(), err)
			case s.DefaultAboveZero:
			case err != nil:
				t.Errorf("--%s 0 = %v, want it taken", l.Flag(), err)
			default:
				if v, set := c.Limits.Get(l); !set || v != 0 {
					t.Errorf("--%s 0 = Limits[%s] %v (set %v), want 0", l.Flag(), l, v, set)
				}
				if v := c.LimitRules().Defaults.Values.Value(l); v != 0 {
					t.Errorf("--%s 0: LimitRules default %v, want 0", l.Flag(), v)
				}
			}
		})
	}
}
