// Package netlimit bounds the connections a listener holds open at once.
// A connection beyond the bound is closed as soon as it is accepted, so an
// attacker who opens connections and holds them costs the process at most
// the bound in file descriptors, and a client beyond it learns at once
// (its connection is closed) instead of waiting in a queue that
// golang.org/x/net/netutil.LimitListener would keep it in.
package netlimit

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
)

// Listener is a net.Listener that holds at most a fixed number of
// connections open at once. Safe for concurrent use.
type Listener struct {
	net.Listener
	max      int64
	open     atomic.Int64
	refused  atomic.Uint64
	onRefuse func()
}

// New wraps ln so that at most max of its accepted connections are open at
// once; max must be at least 1. onRefuse, when not nil, is called for each
// connection closed for being over the bound (for a metric); it must be
// quick and safe for concurrent use.
func New(ln net.Listener, max int, onRefuse func()) (*Listener, error) {
	if max < 1 {
		return nil, errors.New("netlimit: max must be at least 1")
	}
	return &Listener{Listener: ln, max: int64(max), onRefuse: onRefuse}, nil
}

// Accept waits for the next connection within the bound. Connections over
// the bound are closed at once and never returned.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refused.Add(1)
			c.Close()
			if l.onRefuse != nil {
				l.onRefuse()
			}
			continue
		}
		return &conn{Conn: c, l: l}, nil
	}
}

// Open returns the number of accepted connections not yet closed.
func (l *Listener) Open() int { return int(l.open.Load()) }

// Refused returns how many connections were closed for being over the
// bound.
func (l *Listener) Refused() uint64 { return l.refused.Load() }

// conn gives its slot back when closed, once.
type conn struct {
	net.Conn
	l    *Listener
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
