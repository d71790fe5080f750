package token

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/sidecar/fakeserver"
	"github.com/repool/repool/internal/testenv"
)

// forwarder is a TCP forwarder to a real Redis that the test can cut and
// restore on the same address, so that the client sees Redis go away and
// come back.
type forwarder struct {
	t      *testing.T
	addr   string
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns []net.Conn
	wg    sync.WaitGroup
}

func newForwarder(t *testing.T, target string) *forwarder {
	f := &forwarder{t: t, target: target}
	f.up()
	t.Cleanup(f.down)
	return f
}

func (f *forwarder) up() {
	f.t.Helper()
	addr := f.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		f.t.Fatalf("forwarder listen %s: %v", addr, err)
	}
	f.mu.Lock()
	f.ln, f.addr = ln, ln.Addr().String()
	f.mu.Unlock()
	f.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r, err := net.Dial("tcp", f.target)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, r)
			f.mu.Unlock()
			f.wg.Go(func() { io.Copy(r, c); r.Close() })
			f.wg.Go(func() { io.Copy(c, r); c.Close() })
		}
	})
}

// down closes the listener and every forwarded connection.
func (f *forwarder) down() {
	f.mu.Lock()
	if f.ln != nil {
		f.ln.Close()
		f.ln = nil
	}
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
	f.mu.Unlock()
	f.wg.Wait()
}

func TestRedisComesBack(t *testing.T) {
	redisAddr, _ := testenv.Redis(t)
	fwd := newForwarder(t, redisAddr)
	clk := clock.NewFake(time.Now())
	fake := fakeserver.Start(t, fakeserver.Config{Clock: clk})
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	rc := &Redis{Addr: fwd.addr}
	s := newSource(t, Config{Issuer: dial(t, fake.Addr()), Redis: rc, Clock: clk, Log: log})
	if _, err := s.Token(context.Background()); err != nil {
		t.Fatalf("Token() = %v", err)
	}
	logged := func(msg string) bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(logs.String(), msg)
	}

	fwd.down()
	clk.Advance(16 * time.Minute)
	if _, err := s.Token(context.Background()); err != nil || !logged("redis token cache unreachable") {
		t.Fatalf("Token() with Redis away = %v; logged %q; want a token and the outage logged", err, logs.String())
	}

	fwd.up()
	clk.Advance(16 * time.Minute)
	fresh, err := s.Token(context.Background())
	if err != nil || !logged("redis token cache reachable again") {
		t.Fatalf("Token() with Redis back = %v; logged %q; want a token and the recovery logged", err, logs.String())
	}
	// Redis serves again: a cold sidecar gets the token stored after the
	// recovery, without IssueToken.
	issued := fake.Calls("IssueToken")
	cold := newSource(t, Config{Issuer: dial(t, fake.Addr()), Redis: rc, Clock: clk})
	if got, err := cold.Token(context.Background()); err != nil || got.Value != fresh.Value || fake.Calls("IssueToken") != issued {
		t.Fatalf("cold Token() after the recovery = %v, %v (%d new issuances); want %s from Redis", got, err, fake.Calls("IssueToken")-issued, fresh.Value)
	}
}
