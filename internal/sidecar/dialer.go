package sidecar

import (
	"context"
	"net"
	"sync"
	"time"
)

// unackedTimeout bounds how long data the sidecar sent to a provider may
// stay unacknowledged before the kernel drops the connection
// (TCP_USER_TIMEOUT, on Linux). A provider's host answers ACKs from its
// kernel however busy it is; what leaves data unacknowledged is a peer
// that is gone without a reset: an LB host cut off the network, or one
// whose link went down, after the VIP has moved on. Without the bound such
// a connection lives on TCP's retransmission backoff (seconds, growing),
// and every call and probe sent on it waits there; with it the connection
// ends within this time, and the next attempt dials the VIP afresh, which
// reaches its new holder as soon as the VIP has moved.
const unackedTimeout = time.Second

// synTimeout bounds a TCP connect to a provider. The endpoint is a VIP on
// the sidecar's own network (the whole connection attempt, TLS included,
// is bounded by grpc's MinConnectTimeout, 500 ms): its holder answers a SYN
// within a round trip, or refuses it. A SYN that goes unanswered went to
// where the VIP no longer is (its old holder's link cut, or the instant
// between the old holder giving the VIP up and the new one taking it);
// given up after this long, the next attempt, a backoff later, reaches the
// new holder, instead of the whole attempt waiting out MinConnectTimeout.
const synTimeout = 200 * time.Millisecond

// dialer dials a provider's endpoint over TCP within synTimeout, with
// unackedTimeout set on the socket (setUnackedTimeout; nothing where the
// system has no such option).
func dialer(ctx context.Context, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: synTimeout, Control: setUnackedTimeout(unackedTimeout)}
	return d.DialContext(ctx, "tcp", addr)
}

// conns dials a provider's endpoint (dialer) and keeps the connections it
// made until they are closed, so that drop can end them.
type conns struct {
	mu   sync.Mutex
	live map[*trackedConn]struct{}
}

func newConns() *conns { return &conns{live: map[*trackedConn]struct{}{}} }

// dial is grpc's context dialer: dialer, the connection tracked.
func (cs *conns) dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := dialer(ctx, addr)
	if err != nil {
		return nil, err
	}
	t := &trackedConn{Conn: c, cs: cs}
	cs.mu.Lock()
	cs.live[t] = struct{}{}
	cs.mu.Unlock()
	return t, nil
}

// drop closes every connection dial made that is still open, and returns
// how many. grpc sees its transport fail and dials again for the next
// call.
func (cs *conns) drop() int {
	cs.mu.Lock()
	all := make([]*trackedConn, 0, len(cs.live))
	for t := range cs.live {
		all = append(all, t)
	}
	cs.mu.Unlock()
	for _, t := range all {
		t.Close()
	}
	return len(all)
}

// trackedConn leaves its conns when closed.
type trackedConn struct {
	net.Conn
	cs   *conns
	once sync.Once
}

func (t *trackedConn) Close() error {
	t.once.Do(func() {
		t.cs.mu.Lock()
		delete(t.cs.live, t)
		t.cs.mu.Unlock()
	})
	return t.Conn.Close()
}
