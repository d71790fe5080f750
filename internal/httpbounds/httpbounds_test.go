package httpbounds

import (
	"net"
	"strings"
	"testing"
	"time"
)

func TestValidateNamesTheKey(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		prefix string
		want   string // part of the error; "" for valid
	}{
		{"defaults", Config{}, "", ""},
		{"set", Config{ReadHeaderTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: time.Second, IdleTimeout: time.Second, MaxHeaderBytes: 4096, MaxConnections: 1}, "http_", ""},
		{"tiny header timeout", Config{ReadHeaderTimeout: time.Millisecond}, "http_", "http_read_header_timeout 1ms: want at least 10ms"},
		{"negative write timeout", Config{WriteTimeout: -time.Second}, "", "write_timeout -1s"},
		{"read below header", Config{ReadHeaderTimeout: 5 * time.Second, ReadTimeout: time.Second}, "http_", "http_read_timeout 1s: want at least http_read_header_timeout 5s"},
		{"tiny header block", Config{MaxHeaderBytes: 100}, "", "max_header_bytes 100: want 4096 to 1048576"},
		{"huge header block", Config{MaxHeaderBytes: 2 << 20}, "", "max_header_bytes 2097152"},
		{"no connections", Config{MaxConnections: -1}, "http_", "http_max_connections -1: want at least 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate(tt.prefix)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate(%q) = got %v, want nil", tt.prefix, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate(%q) = got %v, want an error containing %q", tt.prefix, err, tt.want)
			}
		})
	}
}

func TestServerAndLimitUseTheBounds(t *testing.T) {
	c := Config{ReadTimeout: 42 * time.Second, MaxConnections: 3}
	s := c.Server(nil, nil)
	if s.ReadHeaderTimeout != 10*time.Second || s.ReadTimeout != 42*time.Second || s.WriteTimeout != 30*time.Second ||
		s.IdleTimeout != 2*time.Minute || s.MaxHeaderBytes != 64<<10 {
		t.Fatalf("Server() = %+v, want the defaults and ReadTimeout 42s", s)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := c.Limit(inner, nil)
	if err != nil {
		t.Fatalf("Limit() = got error %v, want nil", err)
	}
	defer ln.Close()
	if _, ok := ln.(interface{ Open() int }); !ok {
		t.Fatalf("Limit() = got %T, want a bounded listener", ln)
	}
}
