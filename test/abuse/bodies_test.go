package abuse

import (
	"bytes"
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/testenv"
)

// pinner is one raw HTTP/2 connection of an attacker that opens unary
// calls and sends each request all but its last byte, within the flow
// control the server grants, so that gRPC holds what it read of each
// request until the call ends. It counts what the server refused.
type pinner struct {
	c       net.Conn
	fr      *http2.Framer
	wmu     sync.Mutex // writes of fr, enc and hb
	enc     *hpack.Encoder
	hb      bytes.Buffer
	nextID  uint32 // the last stream opened (-1: none yet)
	mu      sync.Mutex
	cond    *sync.Cond
	connWin int64
	win     map[uint32]int64
	initWin int64
	ended   map[uint32]bool // refused or ended by the server
	sent    atomic.Int64    // request bytes sent
	refused atomic.Int64    // streams the server ended before their request was whole
}

// newPinner connects to addr and sends the HTTP/2 preface.
func newPinner(addr string) (*pinner, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &pinner{c: c, nextID: ^uint32(0), fr: http2.NewFramer(c, c), connWin: 65535, initWin: 65535, win: map[uint32]int64{}, ended: map[uint32]bool{}}
	p.cond = sync.NewCond(&p.mu)
	p.enc = hpack.NewEncoder(&p.hb)
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		c.Close()
		return nil, err
	}
	p.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	p.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	go p.read()
	return p, nil
}

// read follows the server's frames: window updates, settings, ends of
// streams.
func (p *pinner) read() {
	defer func() {
		p.mu.Lock()
		p.connWin = -1 << 40 // closed: every writer gives up
		p.cond.Broadcast()
		p.mu.Unlock()
	}()
	for {
		f, err := p.fr.ReadFrame()
		if err != nil {
			return
		}
		// Answers first, without p.mu: pin takes p.mu inside p.wmu.
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				p.wmu.Lock()
				p.fr.WriteSettingsAck()
				p.wmu.Unlock()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				p.wmu.Lock()
				p.fr.WritePing(true, f.Data)
				p.wmu.Unlock()
			}
		}
		p.mu.Lock()
		switch f := f.(type) {
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				p.connWin += int64(f.Increment)
			} else {
				p.win[f.StreamID] += int64(f.Increment)
			}
		case *http2.SettingsFrame:
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok && !f.IsAck() {
				for id := range p.win {
					p.win[id] += int64(v) - p.initWin
				}
				p.initWin = int64(v)
			}
		case *http2.RSTStreamFrame:
			p.end(f.StreamID)
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				p.end(f.StreamID)
			}
		case *http2.GoAwayFrame:
			p.connWin = -1 << 40
		}
		p.cond.Broadcast()
		p.mu.Unlock()
	}
}

// end marks a stream ended by the server; p.mu is held.
func (p *pinner) end(id uint32) {
	if !p.ended[id] {
		p.ended[id] = true
		p.refused.Add(1)
	}
}

// pin opens a stream as a call of method with the metadata and sends
// size bytes of a request message of size+1 bytes, returning once they
// are sent or the server ended the stream or the connection.
func (p *pinner) pin(method string, md [][2]string, size int) {
	// Stream ids and one encoder a connection, used in the order of the
	// header blocks sent: ids must grow, and the server's decoder keeps
	// one table a connection.
	p.wmu.Lock()
	p.nextID += 2
	id := p.nextID
	p.mu.Lock()
	p.win[id] = p.initWin
	p.mu.Unlock()
	p.hb.Reset()
	for _, f := range append([][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", method},
		{":authority", "repool"}, {"content-type", "application/grpc"}, {"te", "trailers"}}, md...) {
		p.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: p.hb.Bytes(), EndHeaders: true})
	p.wmu.Unlock()
	if err != nil {
		return
	}
	msg := make([]byte, 5+size)
	binary.BigEndian.PutUint32(msg[1:5], uint32(size+1)) // one byte more than is ever sent
	for len(msg) > 0 {
		p.mu.Lock()
		for !p.ended[id] && p.connWin >= 0 && (p.connWin == 0 || p.win[id] <= 0) {
			p.cond.Wait()
		}
		if p.ended[id] || p.connWin < 0 {
			p.mu.Unlock()
			return
		}
		n := min(int64(len(msg)), p.connWin, p.win[id], 16<<10)
		p.connWin -= n
		p.win[id] -= n
		p.mu.Unlock()
		p.wmu.Lock()
		err := p.fr.WriteData(id, false, msg[:n])
		p.wmu.Unlock()
		if err != nil {
			return
		}
		p.sent.Add(n)
		msg = msg[n:]
	}
}

func (p *pinner) close() { p.c.Close() }

// pinRequests opens conns connections to the server's gRPC port and, on
// each, streams calls of Register with the metadata, each sending all but
// the last byte of a request of the server's largest size (1 MiB), and
// returns the attacker's connections and how long the sending took, once
// no byte was sent for a second.
func pinRequests(t *testing.T, srv *server, conns, streams int, md [][2]string) []*pinner {
	t.Helper()
	var (
		ps []*pinner
		wg sync.WaitGroup
	)
	for range conns {
		p, err := newPinner(srv.grpcAddr)
		if err != nil {
			t.Fatalf("connecting to the gRPC port = got error %v, want a connection", err)
		}
		t.Cleanup(p.close)
		ps = append(ps, p)
		for range streams {
			wg.Go(func() { p.pin(repoolv1.PoolService_Register_FullMethodName, md, 1<<20-6) })
		}
	}
	total := func() int64 {
		var n int64
		for _, p := range ps {
			n += p.sent.Load()
		}
		return n
	}
	last, lastChange := total(), time.Now()
	testenv.Eventually(t, 60*time.Second, "the attacker's sending to stop", func() bool {
		if n := total(); n != last {
			last, lastChange = n, time.Now()
		}
		if srv.rss(t) > 2<<30 {
			return true // far past any bound: stop pumping the machine's memory
		}
		return time.Since(lastChange) > time.Second
	})
	return ps
}

// attackUnauthenticatedRequests: gRPC reads a call's request whole before
// authenticating it. A client without a valid credential opens 16
// connections and, on each, 256 Register calls (the server's bound of
// streams a connection) whose requests it sends all but the last byte of,
// and holds them: with no credential, then with well-formed API keys the
// server has never seen. Before, each call had the server buffer up to
// 4 MiB: 16 GiB for these calls. Now calls without a credential are
// refused before a byte is read, calls with an unknown key share 64 slots
// across all connections (64 MiB at the 1 MiB message bound) and end after
// the handshake timeout, and the victim is served throughout.
func attackUnauthenticatedRequests(t *testing.T, bins binaries) {
	srv := startServer(t, bins, "")
	v := newVictim(t, srv)
	v.calls(5)
	before, _ := v.calls(20)
	base := srv.rss(t)
	for _, a := range []struct {
		name string
		md   [][2]string
	}{
		{"no credential", nil},
		{"unknown API keys", [][2]string{{"x-api-key", "rpk_" + string(bytes.Repeat([]byte("x"), 40))}}},
	} {
		start := time.Now()
		ps := pinRequests(t, srv, 16, 256, a.md)
		peak := srv.rss(t)
		during, errs := v.calls(20)
		var sent, refused int64
		for _, p := range ps {
			sent += p.sent.Load()
			refused += p.refused.Load()
		}
		t.Logf("attack (%s): 16 connections × 256 Register calls, %d MiB of requests sent in %v, %d of 4096 calls ended by the server; server RSS %d MiB -> %d MiB (+%d MiB); victim median %v p90 %v (before %v), %d errors",
			a.name, sent/mib, time.Since(start).Round(100*time.Millisecond), refused, base/mib, peak/mib, (peak-base)/mib,
			quantile(during, 0.5), quantile(during, 0.9), quantile(before, 0.5), len(errs))
		if grown := peak - base; grown > unverifiedBound {
			t.Errorf("%s: server RSS grew by %d MiB, want at most %d MiB", a.name, grown/mib, unverifiedBound/mib)
		}
		if len(errs) > 0 {
			t.Errorf("%s: the victim's calls during the attack = got errors %v, want none", a.name, errs)
		}
		if b, d := quantile(before, 0.5), quantile(during, 0.5); d > 3*b+20*time.Millisecond {
			t.Errorf("%s: the victim's median latency during the attack = got %v, want within 3x its usual %v (+20ms)", a.name, d, b)
		}
		// The calls held with an unknown key are ended by the handshake
		// timeout (10s), with their connections, which no call claimed.
		testenv.Eventually(t, 30*time.Second, "every held call to be ended", func() bool {
			var n int64
			for _, p := range ps {
				n += p.refused.Load()
			}
			return n == 16*256 || allClosed(ps)
		})
		for _, p := range ps {
			p.close()
		}
	}
}

// allClosed reports whether the server closed every connection.
func allClosed(ps []*pinner) bool {
	for _, p := range ps {
		p.mu.Lock()
		open := p.connWin >= 0
		p.mu.Unlock()
		if open {
			return false
		}
	}
	return true
}

// attackTenantRequests: a tenant with a valid key (one call made, so the
// server knows it) does the same: 16 connections × 256 Register calls held
// one byte short. Before, 16 GiB of requests; now its calls in flight are
// 128 (the rest refused before a byte is read): 128 MiB at most.
func attackTenantRequests(t *testing.T, bins binaries) {
	srv := startServer(t, bins, "")
	v := newVictim(t, srv)
	key := srv.newTenant(t, "pinner")
	if _, err := srv.pool(t).GetResource(withKey(key), &repoolv1.GetResourceRequest{Id: "none"}); status.Code(err) != codes.NotFound {
		t.Fatalf("the pinner's first call = got %v, want NOT_FOUND", err)
	}
	v.calls(5)
	before, _ := v.calls(20)
	base := srv.rss(t)
	start := time.Now()
	ps := pinRequests(t, srv, 16, 256, [][2]string{{"x-api-key", key}})
	peak := srv.rss(t)
	during, errs := v.calls(20)
	var sent, refused int64
	for _, p := range ps {
		sent += p.sent.Load()
		refused += p.refused.Load()
	}
	t.Logf("attack (a tenant's key): 16 connections × 256 Register calls, %d MiB of requests sent in %v, %d of 4096 refused; server RSS %d MiB -> %d MiB (+%d MiB); victim median %v p90 %v (before %v), %d errors",
		sent/mib, time.Since(start).Round(100*time.Millisecond), refused, base/mib, peak/mib, (peak-base)/mib,
		quantile(during, 0.5), quantile(during, 0.9), quantile(before, 0.5), len(errs))
	if grown := peak - base; grown > tenantCallsBound {
		t.Errorf("server RSS grew by %d MiB, want at most %d MiB", grown/mib, tenantCallsBound/mib)
	}
	if refused < 16*256-128 {
		t.Errorf("calls refused = got %d, want at least %d (all but the tenant's 128)", refused, 16*256-128)
	}
	if len(errs) > 0 {
		t.Errorf("the victim's calls during the attack = got errors %v, want none", errs)
	}
	if b, d := quantile(before, 0.5), quantile(during, 0.5); d > 3*b+20*time.Millisecond {
		t.Errorf("the victim's median latency during the attack = got %v, want within 3x its usual %v (+20ms)", d, b)
	}
}

// unverifiedBound and tenantCallsBound are what requests held one byte
// short may add to the server's resident memory: 64 and 128 calls of up to
// 1 MiB, read in buffers of up to 16 KiB (a data frame each), plus the
// connections (16) and the refused streams' garbage.
const (
	unverifiedBound  = 128 * mib
	tenantCallsBound = 224 * mib
)
