package sidecar

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// TestConnsDropEndsEveryLiveConnection: drop closes the connections dial
// made that are still open (the peer reads EOF), and a connection closed
// by its user leaves the set.
func TestConnsDropEndsEveryLiveConnection(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 3)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	cs := newConns()
	var mine []net.Conn
	for range 3 {
		c, err := cs.dial(context.Background(), l.Addr().String())
		if err != nil {
			t.Fatalf("dial = %v", err)
		}
		mine = append(mine, c)
	}
	mine[0].Close() // its user closed it: not dropped again
	if n := cs.drop(); n != 2 {
		t.Fatalf("drop() = %d connections, want the 2 still open", n)
	}
	if n := cs.drop(); n != 0 {
		t.Fatalf("drop() again = %d, want 0", n)
	}
	for range 3 {
		peer := <-accepted
		peer.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := peer.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("the peer of a dropped connection reads %v, want EOF", err)
		}
		peer.Close()
	}
}
