package sidecar_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/config"
	"github.com/repool/repool/internal/sidecar/fakeserver"
)

// shortDeadlines is a configuration whose HTTP deadlines pass within a
// test: headers 200ms, whole requests 400ms, answers 600ms (a provider's
// calls 300ms), idle connections 500ms.
func shortDeadlines(fake *fakeserver.Server) config.Config {
	pc := fast(fake)
	pc.Timeout = 300 * time.Millisecond
	cfg := one("p", pc)
	cfg.HTTP.ReadHeaderTimeout, cfg.HTTP.ReadTimeout, cfg.HTTP.WriteTimeout, cfg.HTTP.IdleTimeout = 200*time.Millisecond, 400*time.Millisecond, 600*time.Millisecond, 500*time.Millisecond
	return cfg
}

// TestEventStreamOutlivesTheDeadlines: an event stream lasts well beyond
// read_timeout and write_timeout, which end any other request: it sets a
// write deadline per event instead of the second.
func TestEventStreamOutlivesTheDeadlines(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{})
	h := start(t, shortDeadlines(fake), sidecar.Options{Keepalive: 10 * time.Millisecond})
	es := openEvents(t, h, "p")
	// Real time: the deadlines are the connection's, on the wall clock.
	for opened := time.Now(); time.Since(opened) < 1500*time.Millisecond; time.Sleep(10 * time.Millisecond) {
		select { // until every deadline of the configuration has passed twice
		case <-es.done:
			t.Fatalf("event stream ended after %v with %v, want it open past the deadlines", time.Since(opened), es.err)
		default:
		}
	}
	es.stillOpen(t)
}

// TestSlowRequestsAreCutOff: headers that trickle are cut at
// read_header_timeout, a body that trickles at read_timeout (408), an idle
// keep-alive connection at idle_timeout; each closes the connection.
func TestSlowRequestsAreCutOff(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{})
	h := start(t, shortDeadlines(fake), sidecar.Options{})
	tests := []struct {
		name   string
		send   func(c net.Conn) // what the client sends, slowly
		status string           // the status line, if any, before the close
		within time.Duration
	}{
		{"headers byte by byte", func(c net.Conn) {
			for _, b := range []byte("POST /v1/providers/p/acquire HTTP/1.1\r\nHost: localhost\r\n") {
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
				time.Sleep(20 * time.Millisecond) // real time: a client that trickles against the connection's wall-clock deadlines
			}
		}, "", 2 * time.Second},
		{"a body byte by byte", func(c net.Conn) {
			io.WriteString(c, "POST /v1/providers/p/acquire HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
			for range 100 {
				if _, err := c.Write([]byte(" ")); err != nil {
					return
				}
				time.Sleep(20 * time.Millisecond) // real time: a client that trickles against the connection's wall-clock deadlines
			}
		}, "HTTP/1.1 408", 2 * time.Second},
		{"nothing at all", func(net.Conn) {}, "", 2 * time.Second},
		{"idle after a request", func(c net.Conn) {
			io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
		}, "HTTP/1.1 200", 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", h.s.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			go tt.send(c)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			raw, err := io.ReadAll(bufio.NewReader(c))
			if err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
				t.Fatalf("reading until the server closes = got error %v (after %s), want EOF", err, raw)
			}
			if d := time.Since(start); d > tt.within {
				t.Errorf("the server closed the connection after %v, want within %v", d, tt.within)
			}
			if !strings.HasPrefix(string(raw), tt.status) {
				t.Errorf("answer before the close = got %q, want it to start with %q", raw, tt.status)
			}
		})
	}
	if n := upstreamCalls(fake); n != 0 {
		t.Errorf("upstream calls of slow requests = got %d, want 0", n)
	}
}
