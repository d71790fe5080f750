//go:build !linux

package sidecar

import (
	"syscall"
	"time"
)

// setUnackedTimeout does nothing where TCP_USER_TIMEOUT does not exist: a
// connection to a peer gone without a reset then ends on TCP's own
// retransmission timeouts.
func setUnackedTimeout(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
