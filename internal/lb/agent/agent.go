// Package agent answers HAProxy's agent check on a server's HTTP port.
//
// HAProxy's HTTP check alone cannot bring a standby back: with
// "http-check disable-on-404" a 404 moves an UP server to NOLB, but a
// server that is DOWN (restarted, or one check timed out) and answers 404
// stays DOWN. The agent check (agent-check, agent-send Hello, agent-port
// the HTTP port) can: its "up" sets the server's check health back, and a
// weight of 0% keeps it out of the load balancing until the next HTTP
// check's 404 makes it NOLB. The active server answers Active, a healthy
// standby Standby, a server that is not ready Down.
//
// Listen shares the HTTP port: a connection whose first byte is Hello's
// (no HTTP request, HTTP/2 preface or TLS handshake starts with a
// lower-case letter) is an agent check; every other connection goes to the
// HTTP server, its first byte given back. The agent speaks plaintext even
// when the HTTP port speaks TLS: it tells only up or down and a weight.
package agent

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"time"
)

// Hello is what HAProxy sends first on an agent connection (agent-send).
const Hello = "repool-agent"

// Answers, without the line end Listen adds.
const (
	// Active: up, full weight.
	Active = "up 100%"
	// Standby: up, weight 0, so that a standby coming back from DOWN
	// (where a 404 does not make it NOLB) takes no traffic until the next
	// HTTP check's 404 makes it NOLB.
	Standby = "up 0%"
)

// Down is the answer of a server that is not ready: DOWN, with why (one
// line; HAProxy logs it after "via agent : down"). Once its agent said
// down, only its agent's up brings a server back, so a former active
// server that comes back as a standby gets its 0% weight first.
func Down(why string) string {
	why = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, why)
	return "down # " + why
}

// Listen returns a listener that answers agent connections accepted by ln
// with answer() and a line end, and closes them, and returns every other
// connection from Accept. A connection must send its first byte (and an
// agent connection all of Hello) within timeout, or it is closed. Close
// closes ln.
func Listen(ln net.Listener, answer func() string, timeout time.Duration) net.Listener {
	l := &listener{Listener: ln, answer: answer, timeout: timeout, accepted: make(chan accepted), done: make(chan struct{}), sniffing: map[net.Conn]struct{}{}}
	go l.run()
	return l
}

type accepted struct {
	conn net.Conn
	err  error
}

type listener struct {
	net.Listener
	answer   func() string
	timeout  time.Duration
	accepted chan accepted
	done     chan struct{}
	once     sync.Once

	mu       sync.Mutex
	closed   bool
	sniffing map[net.Conn]struct{} // closed by Close
}

// run accepts from ln and sniffs each connection on its own goroutine, so
// that a silent client holds up no other. Errors go to Accept, whose
// caller (http.Server) backs off on temporary ones.
func (l *listener) run() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			select {
			case l.accepted <- accepted{err: err}:
			case <-l.done:
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go l.sniff(c)
	}
}

func (l *listener) sniff(c net.Conn) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		c.Close()
		return
	}
	l.sniffing[c] = struct{}{}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.sniffing, c)
		l.mu.Unlock()
	}()
	_ = c.SetDeadline(time.Now().Add(l.timeout))
	var first [1]byte
	if _, err := io.ReadFull(c, first[:]); err != nil {
		c.Close()
		return
	}
	if first[0] != Hello[0] {
		_ = c.SetDeadline(time.Time{})
		select {
		case l.accepted <- accepted{conn: &replayConn{Conn: c, first: first[0]}}:
		case <-l.done:
			c.Close()
		}
		return
	}
	defer c.Close()
	rest := make([]byte, len(Hello)-1)
	if _, err := io.ReadFull(c, rest); err != nil || string(rest) != Hello[1:] {
		return
	}
	_, _ = io.WriteString(c, l.answer()+"\n")
}

// Accept returns the next connection that is not an agent check.
func (l *listener) Accept() (net.Conn, error) {
	select {
	case a := <-l.accepted:
		return a.conn, a.err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close closes the listener it wraps and the connections whose first
// bytes it is still waiting for.
func (l *listener) Close() error {
	l.once.Do(func() { close(l.done) })
	l.mu.Lock()
	l.closed = true
	for c := range l.sniffing {
		c.Close()
	}
	l.mu.Unlock()
	return l.Listener.Close()
}

// replayConn gives back the byte sniff read.
type replayConn struct {
	net.Conn
	first byte
	read  bool
}

func (c *replayConn) Read(p []byte) (int, error) {
	if c.read || len(p) == 0 {
		return c.Conn.Read(p)
	}
	c.read = true
	p[0] = c.first
	return 1, nil
}
