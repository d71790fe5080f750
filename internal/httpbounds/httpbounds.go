// Package httpbounds is the one definition of the deadlines and bounds that
// every HTTP server of repool has (the server's health, metrics and control
// plane port; the sidecar's API): how long a client may take to send its
// headers and its whole request, how long an answer may take, how long a
// keep-alive connection may idle, how large headers may be, and how many
// connections may be open at once. A slow, idle or silent client is cut
// off and gives its descriptor back; one connection too many is closed at
// once (internal/netlimit).
package httpbounds

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/repool/repool/internal/netlimit"
)

// Config holds the bounds. The zero value of every field means its
// default (WithDefaults). The YAML keys are the sidecar's; the server has
// them as flags with an http- prefix.
type Config struct {
	// ReadHeaderTimeout bounds receiving a request's headers. Default 10s.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds receiving a whole request, body included; at
	// least ReadHeaderTimeout. Default 30s.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds the time from a request's headers to the end of
	// its answer. Streaming handlers replace it with deadlines of their own
	// (http.ResponseController). Default 30s.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// IdleTimeout is how long a keep-alive connection may wait for its
	// next request. Default 2m.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes bounds a request's header block (larger: 431). 4096
	// to 1 MiB; default 64 KiB.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxConnections bounds the connections open at once; one more is
	// closed as soon as it is accepted. Default 1024.
	MaxConnections int `yaml:"max_connections"`
}

// WithDefaults returns c with defaults in place of zero values.
func (c Config) WithDefaults() Config {
	for _, d := range []struct {
		p *time.Duration
		v time.Duration
	}{{&c.ReadHeaderTimeout, 10 * time.Second}, {&c.ReadTimeout, 30 * time.Second}, {&c.WriteTimeout, 30 * time.Second}, {&c.IdleTimeout, 2 * time.Minute}} {
		if *d.p == 0 {
			*d.p = d.v
		}
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = 64 << 10
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = 1024
	}
	return c
}

// Validate names the first bad field, after defaults, by its key: prefix
// followed by the YAML key ("http_" and "read_timeout" give
// "http_read_timeout").
func (c Config) Validate(prefix string) error {
	c = c.WithDefaults()
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"read_header_timeout", c.ReadHeaderTimeout}, {"read_timeout", c.ReadTimeout}, {"write_timeout", c.WriteTimeout}, {"idle_timeout", c.IdleTimeout}} {
		if d.v < 10*time.Millisecond {
			return fmt.Errorf("%s%s %v: want at least 10ms", prefix, d.key, d.v)
		}
	}
	switch {
	case c.ReadTimeout < c.ReadHeaderTimeout:
		return fmt.Errorf("%sread_timeout %v: want at least %sread_header_timeout %v (it includes the headers)", prefix, c.ReadTimeout, prefix, c.ReadHeaderTimeout)
	case c.MaxHeaderBytes < 4096 || c.MaxHeaderBytes > 1<<20:
		return fmt.Errorf("%smax_header_bytes %d: want 4096 to 1048576", prefix, c.MaxHeaderBytes)
	case c.MaxConnections < 1:
		return fmt.Errorf("%smax_connections %d: want at least 1", prefix, c.MaxConnections)
	}
	return nil
}

// Server returns an http.Server for handler with c's deadlines and header
// bound (defaults applied), logging its own errors to errorLog.
func (c Config) Server(handler http.Handler, errorLog *log.Logger) *http.Server {
	c = c.WithDefaults()
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		WriteTimeout:      c.WriteTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    c.MaxHeaderBytes,
		ErrorLog:          errorLog,
	}
}

// Limit wraps ln so that at most MaxConnections of its connections are
// open at once, calling onRefuse (if not nil) for each one closed beyond.
func (c Config) Limit(ln net.Listener, onRefuse func()) (net.Listener, error) {
	return netlimit.New(ln, c.WithDefaults().MaxConnections, onRefuse)
}
