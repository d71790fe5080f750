package sidecar

import (
	"context"
	"net"
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

// dialer dials a provider's endpoint over TCP with unackedTimeout set on
// the socket (setUnackedTimeout; nothing where the system has no such
// option).
func dialer(ctx context.Context, addr string) (net.Conn, error) {
	d := net.Dialer{Control: setUnackedTimeout(unackedTimeout)}
	return d.DialContext(ctx, "tcp", addr)
}
