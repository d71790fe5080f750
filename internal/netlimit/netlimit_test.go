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

// TestConnectionsAreSharedAmongOwners: with PerOwner 2, an owner's third
// connection is refused (ErrOwnerFull) and closed after Refusal, another
// owner still gets its own, a connection no owner claimed is closed after
// Unclaimed, and a closed connection gives its owner's slot back.
func TestConnectionsAreSharedAmongOwners(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := NewFair(inner, 10, nil, Options{PerOwner: 2, Unclaimed: 300 * time.Millisecond, Refusal: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dial := func() (client, server net.Conn) {
		t.Helper()
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return c, s
	}
	closedByServer := func(c net.Conn, within time.Duration) bool {
		c.SetReadDeadline(time.Now().Add(within))
		_, err := c.Read(make([]byte, 1))
		return errors.Is(err, io.EOF)
	}
	var a []net.Conn
	for range 2 {
		_, s := dial()
		if err := ln.Attribute(s.RemoteAddr(), "a"); err != nil {
			t.Fatalf("Attribute(a) within its share = %v, want nil", err)
		}
		a = append(a, s)
	}
	if err := ln.Attribute(a[0].RemoteAddr(), "b"); err != nil || ln.Owned("b") != 0 {
		t.Fatalf("Attribute(b) of a's connection = %v (b owns %d), want nil and the connection left to a", err, ln.Owned("b"))
	}
	c3, s3 := dial()
	if err := ln.Attribute(s3.RemoteAddr(), "a"); !errors.Is(err, ErrOwnerFull) {
		t.Fatalf("Attribute(a) beyond its share of 2 = %v, want ErrOwnerFull", err)
	}
	if !closedByServer(c3, 2*time.Second) {
		t.Fatal("a connection refused for its owner's share was not closed")
	}
	_, sb := dial()
	if err := ln.Attribute(sb.RemoteAddr(), "b"); err != nil {
		t.Fatalf("Attribute(b) = %v, want nil: a's share is not b's", err)
	}
	cu, _ := dial()
	start := time.Now()
	if !closedByServer(cu, 2*time.Second) || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("an unclaimed connection closed after %v, want about Unclaimed (300ms)", time.Since(start))
	}
	if err := ln.Attribute(&net.TCPAddr{}, "a"); err != nil {
		t.Fatalf("Attribute of an address not of this listener = %v, want nil (ignored)", err)
	}
	a[0].Close()
	if ln.Owned("a") != 1 {
		t.Fatalf("a owns %d connections after closing one of 2, want 1", ln.Owned("a"))
	}
	_, s4 := dial()
	if err := ln.Attribute(s4.RemoteAddr(), "a"); err != nil {
		t.Fatalf("Attribute(a) after one of its connections closed = %v, want nil", err)
	}
	if n := testing.AllocsPerRun(100, func() { ln.Attribute(s4.RemoteAddr(), "a") }); n != 0 {
		t.Errorf("Attribute of an owned connection allocates %v times, want 0", n)
	}
}
