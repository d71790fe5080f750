package sidecar_test

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/config"
	"github.com/repool/repool/internal/sidecar/fakeserver"
	"github.com/repool/repool/internal/sidecar/resilience"
	"github.com/repool/repool/internal/testenv"
)

// frontEnd is a TCP front end to a fake server that a test stops (its port
// refuses, its connections are cut) and starts again on the same port: a
// VIP whose HAProxy dies and then answers on the other LB host.
type frontEnd struct {
	t       *testing.T
	addr    string
	backend string

	mu    sync.Mutex
	ln    net.Listener
	conns []net.Conn
}

func newFrontEnd(t *testing.T, backend string) *frontEnd {
	f := &frontEnd{t: t, addr: "127.0.0.1:0", backend: backend}
	f.start()
	t.Cleanup(f.stop)
	return f
}

// start listens on the front end's port and forwards each connection.
func (f *frontEnd) start() {
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		f.t.Fatalf("front end: listen %s: %v", f.addr, err)
	}
	f.mu.Lock()
	f.ln, f.addr = ln, ln.Addr().String()
	f.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", f.backend)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, b)
			f.mu.Unlock()
			go func() { io.Copy(b, c); b.Close() }()
			go func() { io.Copy(c, b); c.Close() }()
		}
	}()
}

// stop closes the port and every connection through it.
func (f *frontEnd) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ln != nil {
		f.ln.Close()
		f.ln = nil
	}
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
}

// TestBreakerClosesWhenTheFrontEndAnswersAgain: when the provider's front
// end refuses connections, the breaker opens (outage rule); once it
// answers again, the sidecar reconnects by itself although no call is let
// through, and the breaker probes at once and closes. The breaker's open
// timeout here is an hour, so only the reconnection can close it within
// the test.
func TestBreakerClosesWhenTheFrontEndAnswersAgain(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{})
	fe := newFrontEnd(t, fake.Addr())
	pc := config.Provider{Endpoint: fe.addr, APIKey: fakeserver.DefaultAPIKey, Timeout: 2 * time.Second,
		Breaker: resilience.BreakerPolicy{OpenTimeout: time.Hour}}
	h := start(t, one("p", pc), sidecar.Options{})
	if r := h.acquire("p"); r.status != 200 {
		t.Fatalf("acquire through the front end = %d %s, want 200", r.status, r.raw)
	}

	fe.stop()
	testenv.Eventually(t, 20*time.Second, "the breaker to open while the front end refuses", func() bool {
		h.acquire("p")
		return h.breaker("p")["state"] == "open"
	})

	fe.start()
	testenv.Eventually(t, 20*time.Second, "the breaker to close once the front end answers again", func() bool {
		return h.breaker("p")["state"] == "closed"
	})
	if r := h.acquire("p"); r.status != 200 {
		t.Fatalf("acquire after the front end came back = %d %s, want 200", r.status, r.raw)
	}
}
