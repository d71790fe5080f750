package sidecar

import (
	"context"
	"net"
	"testing"

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
