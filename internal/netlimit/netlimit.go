// Package netlimit bounds the connections a listener holds open at once.
// A connection beyond the bound is closed as soon as it is accepted, so an
// attacker who opens connections and holds them costs the process at most
// the bound in file descriptors, and a client beyond it learns at once
// (its connection is closed) instead of waiting in a queue that
// golang.org/x/net/netutil.LimitListener would keep it in.
//
// A listener made with Options.PerOwner also shares the bound among the
// owners of its connections (tenants, for the gRPC data plane): a
// connection belongs to the owner of the first call admitted on it
// (Attribute), one owner holds at most PerOwner connections, and a
// connection that no call claimed within Options.Unclaimed is closed, so
// that neither one owner nor callers without credentials can hold every
// connection the bound allows.
package netlimit

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Options add fairness to a Listener; the zero value adds none.
type Options struct {
	// PerOwner is the most connections one owner may hold (Attribute); 0
	// means no bound beyond the listener's.
	PerOwner int
	// Unclaimed closes a connection on which no call was attributed to an
	// owner within this long of its accept; 0 means never. Only with
	// PerOwner.
	Unclaimed time.Duration
	// Refusal is how long a connection whose owner is over PerOwner stays
	// open after the refused call, so that the refusal reaches the client
	// before the connection closes. Default 1s.
	Refusal time.Duration
}

// Listener is a net.Listener that holds at most a fixed number of
// connections open at once. Safe for concurrent use.
type Listener struct {
	net.Listener
	max      int64
	open     atomic.Int64
	refused  atomic.Uint64
	onRefuse func()
	opts     Options

	mu     sync.Mutex
	owners map[string]int // connections per owner
}

// ErrOwnerFull is the error of Attribute for an owner that holds its share
// of the connections.
var ErrOwnerFull = errors.New("netlimit: the owner holds its share of the connections")

// New wraps ln so that at most max of its accepted connections are open at
// once; max must be at least 1. onRefuse, when not nil, is called for each
// connection closed for being over the bound (for a metric); it must be
// quick and safe for concurrent use.
func New(ln net.Listener, max int, onRefuse func()) (*Listener, error) {
	return NewFair(ln, max, onRefuse, Options{})
}

// NewFair is New with fairness among the connections' owners (Options).
func NewFair(ln net.Listener, max int, onRefuse func(), opts Options) (*Listener, error) {
	if max < 1 {
		return nil, errors.New("netlimit: max must be at least 1")
	}
	if opts.PerOwner < 0 || opts.Unclaimed < 0 {
		return nil, errors.New("netlimit: PerOwner and Unclaimed must not be negative")
	}
	if opts.Refusal <= 0 {
		opts.Refusal = time.Second
	}
	return &Listener{Listener: ln, max: int64(max), onRefuse: onRefuse, opts: opts, owners: map[string]int{}}, nil
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
		lc := &conn{Conn: c, l: l}
		lc.addr = &Addr{Addr: c.RemoteAddr(), c: lc}
		if l.opts.PerOwner > 0 && l.opts.Unclaimed > 0 {
			l.mu.Lock() // the timer's func may run (and Close read timer) at once
			lc.timer = time.AfterFunc(l.opts.Unclaimed, func() {
				if lc.owner.Load() == nil {
					lc.Close()
				}
			})
			l.mu.Unlock()
		}
		return lc, nil
	}
}

// Open returns the number of accepted connections not yet closed.
func (l *Listener) Open() int { return int(l.open.Load()) }

// Refused returns how many connections were closed for being over the
// bound.
func (l *Listener) Refused() uint64 { return l.refused.Load() }

// Owned returns how many open connections belong to owner.
func (l *Listener) Owned(owner string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.owners[owner]
}

// Addr is the remote address of a connection of a Listener: what its
// RemoteAddr returns, so that a server that hands calls their peer's
// address (gRPC's peer.FromContext) lets Attribute find the connection.
type Addr struct {
	net.Addr
	c *conn
}

// Attribute gives the connection whose remote address is addr (a
// connection of this listener; any other address is ignored) to owner, if
// no owner has it yet. It fails with ErrOwnerFull when owner holds
// Options.PerOwner connections already: the connection is then closed
// after Options.Refusal, so that the caller can answer the refusal first.
// A connection already owned, by owner or another, is left as it is.
// Attributing an owned connection allocates nothing.
func (l *Listener) Attribute(addr net.Addr, owner string) error {
	a, ok := addr.(*Addr)
	if !ok || a.c.l != l || l.opts.PerOwner == 0 {
		return nil
	}
	c := a.c
	if c.owner.Load() != nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.owner.Load() != nil || c.closed {
		return nil
	}
	if n := l.owners[owner]; n >= l.opts.PerOwner {
		time.AfterFunc(l.opts.Refusal, func() { c.Close() })
		return fmt.Errorf("%w: %d of %d", ErrOwnerFull, n, l.opts.PerOwner)
	}
	l.owners[owner]++
	o := owner // escapes here only: the owned path above allocates nothing
	c.owner.Store(&o)
	if c.timer != nil {
		c.timer.Stop()
	}
	return nil
}

// conn gives its slot back when closed, once.
type conn struct {
	net.Conn
	l     *Listener
	addr  *Addr
	once  sync.Once
	owner atomic.Pointer[string]
	timer *time.Timer // set and read under l.mu
	// closed is set under l.mu once the connection has given its slot
	// back, so that Attribute does not count a closed connection.
	closed bool
}

func (c *conn) RemoteAddr() net.Addr { return c.addr }

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.open.Add(-1)
		c.l.mu.Lock()
		if c.timer != nil {
			c.timer.Stop()
		}
		c.closed = true
		if o := c.owner.Load(); o != nil {
			if c.l.owners[*o]--; c.l.owners[*o] <= 0 {
				delete(c.l.owners, *o)
			}
		}
		c.l.mu.Unlock()
	})
	return err
}
