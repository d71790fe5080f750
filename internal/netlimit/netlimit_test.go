package netlimit

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

func TestNewRefusesABadBound(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, max := range []int{0, -1} {
		if _, err := New(ln, max, nil); err == nil {
			t.Errorf("New(ln, %d) = got nil error, want one", max)
		}
	}
}

// TestExcessConnectionsAreClosedAtOnce: with a bound of 2, a third
// connection is closed by the server straight away (the client reads EOF
// well within a second), and a slot freed by a close is taken again.
func TestExcessConnectionsAreClosedAtOnce(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var refused sync.WaitGroup
	ln, err := New(inner, 2, func() { refused.Done() })
	if err != nil {
		t.Fatalf("New() = got error %v, want nil", err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatalf("Dial() = got error %v, want nil", err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	held := []net.Conn{dial(), dial()}
	server := []net.Conn{<-accepted, <-accepted}
	if got := ln.Open(); got != 2 {
		t.Fatalf("Open() = got %d, want 2", got)
	}
	refused.Add(1)
	extra := dial()
	extra.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if _, err := extra.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("Read() on a connection over the bound = got %v, want EOF", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("connection over the bound closed after %v, want at once", d)
	}
	refused.Wait()
	if got := ln.Refused(); got != 1 {
		t.Errorf("Refused() = got %d, want 1", got)
	}
	// Closing twice gives one slot back.
	server[0].Close()
	server[0].Close()
	held[0].Close()
	if got := ln.Open(); got != 1 {
		t.Fatalf("Open() after closing one twice = got %d, want 1", got)
	}
	dial()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("a connection within the bound was not accepted")
	}
	server[1].Close()
}
