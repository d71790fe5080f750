package sidecar

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestDialerBoundsUnackedData: a connection the sidecar dials to a provider
// carries TCP_USER_TIMEOUT of unackedTimeout, so that the kernel drops it
// when the peer vanished without a reset (an LB host cut off after the VIP
// moved) instead of retransmitting into nothing for seconds.
func TestDialerBoundsUnackedData(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := dialer(context.Background(), l.Addr().String())
	if err != nil {
		t.Fatalf("dialer(%s) = %v", l.Addr(), err)
	}
	defer c.Close()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got int
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		got, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
	}); err != nil || gerr != nil {
		t.Fatalf("getsockopt(TCP_USER_TIMEOUT) = %v %v", err, gerr)
	}
	if want := int(unackedTimeout.Milliseconds()); got != want {
		t.Errorf("TCP_USER_TIMEOUT = %d ms, want %d", got, want)
	}
}

// TestDialerGivesUpAnUnansweredSYN: a TCP connect whose SYN goes
// unanswered (a listener whose accept queue is full drops SYNs, as a VIP's
// former holder does) fails within synTimeout by itself, with no deadline
// from the caller; the kernel alone would retransmit the SYN for minutes.
func TestDialerGivesUpAnUnansweredSYN(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil { // room for one connection not yet accepted
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*unix.SockaddrInet4).Port))
	first, err := dialer(context.Background(), addr)
	if err != nil {
		t.Fatalf("dialer(%s), the one connection the queue holds = %v", addr, err)
	}
	defer first.Close()
	done := make(chan error, 1)
	go func() {
		c, err := dialer(context.Background(), addr)
		if c != nil {
			c.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("dialer(%s) with its SYN dropped = %v, want a timeout", addr, err)
		}
	case <-time.After(30 * time.Second): // far beyond synTimeout; the kernel's own retries last minutes
		t.Fatalf("dialer(%s) with its SYN dropped has not given up after 30 s", addr)
	}
}
