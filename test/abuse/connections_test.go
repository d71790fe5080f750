package abuse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/testenv"
)

// Kinds of slow connection.
const (
	slowHeaders = "headers that trickle"
	slowBody    = "a body that trickles"
	idleHTTP    = "idle after one request"
	silentTCP   = "TCP without a byte"
	idleH2      = "HTTP/2 preface, then silence"
)

// holder keeps connections open, trickling a byte into the slow ones every
// 500ms, until the test ends.
type holder struct {
	mu    sync.Mutex
	slow  []net.Conn
	all   []net.Conn
	stop  chan struct{}
	done  sync.WaitGroup
	begun sync.Once
}

func newHolder(t *testing.T) *holder {
	h := &holder{stop: make(chan struct{})}
	t.Cleanup(func() {
		close(h.stop)
		h.done.Wait()
		h.mu.Lock()
		for _, c := range h.all {
			c.Close()
		}
		h.mu.Unlock()
	})
	h.done.Go(func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-tick.C:
				h.mu.Lock()
				for _, c := range h.slow {
					c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
					c.Write([]byte("a"))
				}
				h.mu.Unlock()
			}
		}
	})
	return h
}

// open makes n connections of kind to addr.
func (h *holder) open(t *testing.T, addr, kind string, n int) {
	t.Helper()
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %s = got error %v, want a connection", addr, err)
		}
		var first string
		switch kind {
		case slowHeaders:
			first = "POST /api/v1/tenants HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
		case slowBody:
			first = "POST /v1/providers/default/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
		case idleHTTP:
			first = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
		case idleH2:
			var b bytes.Buffer
			b.WriteString(http2.ClientPreface)
			http2.NewFramer(&b, nil).WriteSettings()
			first = b.String()
		}
		if first != "" {
			if _, err := io.WriteString(c, first); err != nil {
				t.Fatalf("writing to %s = got error %v", addr, err)
			}
		}
		h.mu.Lock()
		h.all = append(h.all, c)
		if kind == slowHeaders || kind == slowBody {
			h.slow = append(h.slow, c)
		}
		h.mu.Unlock()
	}
}

// latencies times n calls of call.
func latencies(t *testing.T, n int, call func() error) []time.Duration {
	t.Helper()
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if err := call(); err != nil {
			t.Fatalf("a normal client's call = got error %v, want success", err)
		}
		out = append(out, time.Since(start))
	}
	return out
}

// httpCall returns a call of GET or POST url on one keep-alive connection.
func httpCall(method, url, body string) func() error {
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}, Timeout: 10 * time.Second}
	return func() error {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s %s = %d", method, url, resp.StatusCode)
		}
		return nil
	}
}

// attackSlowConnections: 300 slow or idle connections on each of the
// sidecar's HTTP, the server's HTTP and the server's gRPC listener (900 in
// all). A normal client keeps its usual latency on each, the processes
// hold one descriptor per connection and no more, and every one of them
// is closed by a deadline (read-header, read, idle, handshake,
// max-connection-idle), so the descriptors come back.
func attackSlowConnections(t *testing.T, bins binaries) {
	srv := startServer(t, bins, "", "--http-read-header-timeout", "6s", "--http-read-timeout", "7s", "--http-idle-timeout", "6s",
		"--grpc-handshake-timeout", "6s", "--grpc-max-connection-idle", "6s", "--grpc-keepalive-time", "30s",
		"--rate-per-second", "100000", "--burst", "100000")
	sc := startSidecar(t, bins, srv, "read_header_timeout: 6s\nread_timeout: 7s\nidle_timeout: 6s\n")
	pool := srv.pool(t)
	if _, err := pool.Register(withKey(srv.key), &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "proxy-1"}}}); err != nil {
		t.Fatal(err)
	}
	calls := []struct {
		name string
		call func() error
	}{
		{"sidecar report", httpCall("POST", sc.base+"/reports", `{"resource_id":"proxy-1","context":"c","outcome":"SUCCESS"}`)},
		{"server /healthz", httpCall("GET", srv.httpURL+"/healthz", "")},
		{"server gRPC GetResource", func() error {
			_, err := pool.GetResource(withKey(srv.key), &repoolv1.GetResourceRequest{Id: "proxy-1"})
			return err
		}},
	}
	before := map[string][]time.Duration{}
	for _, c := range calls {
		latencies(t, 5, c.call) // warm up
		before[c.name] = latencies(t, 40, c.call)
	}
	baseSrv, baseSc := srv.fds(t), sc.fds(t)

	h := newHolder(t)
	opened := time.Now()
	for _, kind := range []string{slowHeaders, slowBody, idleHTTP} {
		h.open(t, sc.addr, kind, 100)
		h.open(t, strings.TrimPrefix(srv.httpURL, "http://"), kind, 100)
	}
	h.open(t, srv.grpcAddr, silentTCP, 150)
	h.open(t, srv.grpcAddr, idleH2, 150)
	testenv.Eventually(t, 5*time.Second, "the processes to hold the connections", func() bool {
		return srv.fds(t) >= baseSrv+550 && sc.fds(t) >= baseSc+280
	})
	for _, c := range calls {
		during := latencies(t, 40, c.call)
		b, d := quantile(before[c.name], 0.5), quantile(during, 0.5)
		t.Logf("%s with 900 slow connections open: median %v (before %v), p90 %v (before %v)", c.name, d, b, quantile(during, 0.9), quantile(before[c.name], 0.9))
		if d > 3*b+5*time.Millisecond {
			t.Errorf("%s: median latency with the slow connections = got %v, want within 3x its usual %v (+5ms)", c.name, d, b)
		}
	}
	if time.Since(opened) > 5*time.Second {
		t.Fatalf("the measurement took %v, longer than the deadlines leave; it measured nothing", time.Since(opened))
	}
	srvFds, scFds := srv.fds(t), sc.fds(t)
	t.Logf("descriptors with the slow connections open: server %d (before %d), sidecar %d (before %d)", srvFds, baseSrv, scFds, baseSc)
	if srvFds > baseSrv+600+20 || scFds > baseSc+300+20 {
		t.Errorf("descriptors = got server %d, sidecar %d; want at most one per connection (server %d, sidecar %d)", srvFds, scFds, baseSrv+620, baseSc+320)
	}
	testenv.Eventually(t, 30*time.Second, "the deadlines to close every slow connection", func() bool {
		return srv.fds(t) <= baseSrv+10 && sc.fds(t) <= baseSc+10
	})
	t.Logf("every slow connection closed by its deadline %v after it was opened", time.Since(opened).Round(100*time.Millisecond))
	for _, c := range calls {
		if err := c.call(); err != nil {
			t.Errorf("%s after the attack = got error %v, want success", c.name, err)
		}
	}
}

// closedQuickly dials addr n times and reports how many connections the
// server closed within a second without a byte sent; the others are kept
// open until the test ends.
func closedQuickly(t *testing.T, h *holder, addr string, n int) int {
	t.Helper()
	var conns []net.Conn
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %s = got error %v", addr, err)
		}
		conns = append(conns, c)
	}
	// Every connection is watched at once: a read blocks until the server
	// sends (gRPC sends its SETTINGS), closes, or a second has passed.
	closedConn := make([]bool, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			c.SetReadDeadline(time.Now().Add(time.Second))
			_, err := c.Read(make([]byte, 1))
			closedConn[i] = errors.Is(err, io.EOF) || (err != nil && strings.Contains(err.Error(), "reset"))
		})
	}
	wg.Wait()
	closed := 0
	for i, c := range conns {
		if closedConn[i] {
			closed++
			c.Close()
			continue
		}
		c.SetReadDeadline(time.Time{})
		h.mu.Lock()
		h.all = append(h.all, c)
		h.mu.Unlock()
	}
	return closed
}

// attackConnectionFlood: 200 connections at each listener, each bounded to
// 50. The ones beyond the bound are closed at once, the processes' open
// descriptors stay within the bound, and clients already connected are
// served throughout.
func attackConnectionFlood(t *testing.T, bins binaries) {
	srv := startServer(t, bins, "", "--http-max-connections", "50", "--grpc-max-connections", "50", "--rate-per-second", "100000", "--burst", "100000")
	sc := startSidecar(t, bins, srv, "max_connections: 50\n")
	pool := srv.pool(t)
	if _, err := pool.Register(withKey(srv.key), &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "proxy-1"}}}); err != nil {
		t.Fatal(err)
	}
	sidecarCall := httpCall("POST", sc.base+"/reports", `{"resource_id":"proxy-1","context":"c","outcome":"SUCCESS"}`)
	metricsClient := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}, Timeout: 10 * time.Second}
	refused := func(listener string) int {
		t.Helper()
		resp, err := metricsClient.Get(srv.httpURL + "/metrics")
		if err != nil {
			t.Fatalf("GET /metrics of a client connected before the flood = got error %v, want success", err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var n int
		for _, line := range strings.Split(string(raw), "\n") {
			if v, ok := strings.CutPrefix(line, `repool_connections_refused_total{listener="`+listener+`"} `); ok {
				fmt.Sscan(v, &n)
			}
		}
		return n
	}
	if err := sidecarCall(); err != nil { // its connections are open before the flood
		t.Fatal(err)
	}
	refused("grpc")
	baseSrv, baseSc := srv.fds(t), sc.fds(t)
	h := newHolder(t)
	for _, l := range []struct{ name, addr string }{
		{"sidecar HTTP", sc.addr}, {"server HTTP", strings.TrimPrefix(srv.httpURL, "http://")}, {"server gRPC", srv.grpcAddr},
	} {
		closed := closedQuickly(t, h, l.addr, 200)
		t.Logf("%s, bound 50: %d of 200 more connections closed within a second", l.name, closed)
		if closed < 145 {
			t.Errorf("%s: connections closed at once beyond the bound of 50 = got %d of 200, want at least 145", l.name, closed)
		}
	}
	srvFds, scFds := srv.fds(t), sc.fds(t)
	t.Logf("descriptors under the flood: server %d (before %d), sidecar %d (before %d)", srvFds, baseSrv, scFds, baseSc)
	if srvFds > baseSrv+2*50+10 || scFds > baseSc+50+10 {
		t.Errorf("descriptors under the flood = got server %d, sidecar %d; want within the bounds (server %d, sidecar %d)", srvFds, scFds, baseSrv+110, baseSc+60)
	}
	if err := sidecarCall(); err != nil {
		t.Errorf("sidecar report of a client connected before the flood = got error %v, want success", err)
	}
	if _, err := pool.GetResource(withKey(srv.key), &repoolv1.GetResourceRequest{Id: "proxy-1"}); err != nil {
		t.Errorf("gRPC call of a client connected before the flood = got error %v, want success", err)
	}
	for _, l := range []string{"grpc", "http"} {
		if n := refused(l); n < 145 {
			t.Errorf("repool_connections_refused_total{listener=%q} = got %d, want at least 145", l, n)
		}
	}
}

// h2conn is a raw HTTP/2 client connection to the gRPC port.
type h2conn struct {
	c  net.Conn
	fr *http2.Framer
}

func dialH2(t *testing.T, addr string) *h2conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	h := &h2conn{c: c, fr: http2.NewFramer(c, c)}
	if err := h.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return h
}

// serverSettings reads until the server's SETTINGS, acknowledges it and
// returns its values.
func (h *h2conn) serverSettings(t *testing.T) map[http2.SettingID]uint32 {
	t.Helper()
	h.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the server's SETTINGS = got error %v", err)
		}
		if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
			out := map[http2.SettingID]uint32{}
			s.ForeachSetting(func(st http2.Setting) error { out[st.ID] = st.Val; return nil })
			h.fr.WriteSettingsAck()
			return out
		}
	}
}

// openStream sends the HEADERS of a unary call and no message, so the
// stream stays open.
func (h *h2conn) openStream(t *testing.T, id uint32) {
	t.Helper()
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	// A health check: admitted without a credential (a data-plane call
	// without one is refused before the stream bound is what refuses it).
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/grpc.health.v1.Health/Check"},
		{":authority", "repool"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b.Bytes(), EndHeaders: true}); err != nil {
		t.Fatalf("opening stream %d = got error %v", id, err)
	}
}

// next reads frames until match accepts one, or the connection ends (nil).
func (h *h2conn) next(limit time.Duration, match func(http2.Frame) bool) http2.Frame {
	h.c.SetReadDeadline(time.Now().Add(limit))
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return nil
		}
		if match(f) {
			return f
		}
	}
}

// attackGRPCStreamsAndPings: one connection opens more streams than the
// server allows per connection (the one over is refused), a client pings
// far more often than the enforcement policy allows (told to calm down and
// cut off), and a peer that stops answering pings is closed by keepalive.
func attackGRPCStreamsAndPings(t *testing.T, bins binaries) {
	srv := startServer(t, bins, "", "--grpc-max-concurrent-streams", "16", "--grpc-max-header-bytes", "8192",
		"--grpc-keepalive-min-time", "5s", "--grpc-keepalive-time", "1s", "--grpc-keepalive-timeout", "1s", "--grpc-max-connection-idle", "1h")

	streams := dialH2(t, srv.grpcAddr)
	settings := streams.serverSettings(t)
	if settings[http2.SettingMaxConcurrentStreams] != 16 || settings[http2.SettingMaxHeaderListSize] != 8192 {
		t.Errorf("server SETTINGS = got %v, want MAX_CONCURRENT_STREAMS 16 and MAX_HEADER_LIST_SIZE 8192", settings)
	}
	for i := range 17 {
		streams.openStream(t, uint32(2*i+1))
	}
	rst := streams.next(5*time.Second, func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok })
	if r, ok := rst.(*http2.RSTStreamFrame); !ok || r.StreamID != 33 || r.ErrCode != http2.ErrCodeRefusedStream {
		t.Errorf("the 17th stream on one connection = got %v, want RST_STREAM REFUSED_STREAM on stream 33", rst)
	} else {
		t.Logf("attack: 17 streams on one connection: stream 33 refused (%v)", r.ErrCode)
	}

	pinger := dialH2(t, srv.grpcAddr)
	pinger.serverSettings(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for i := uint64(0); ctx.Err() == nil; i++ {
			var data [8]byte
			data[0] = byte(i)
			if pinger.fr.WritePing(false, data) != nil {
				return
			}
			time.Sleep(10 * time.Millisecond) // the attack's ping rate, which the server measures in real time
		}
	}()
	start := time.Now()
	away := pinger.next(5*time.Second, func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	if g, ok := away.(*http2.GoAwayFrame); !ok || g.ErrCode != http2.ErrCodeEnhanceYourCalm {
		t.Errorf("a client pinging every 10ms = got %v, want GOAWAY ENHANCE_YOUR_CALM", away)
	} else {
		t.Logf("attack: pings every 10ms: GOAWAY %v (%q) after %v", g.ErrCode, g.DebugData(), time.Since(start).Round(time.Millisecond))
	}
	cancel()

	dead := dialH2(t, srv.grpcAddr)
	dead.serverSettings(t)
	start = time.Now()
	// Read without ever answering a PING: the server's keepalive closes
	// the connection once a ping goes unanswered.
	dead.next(10*time.Second, func(http2.Frame) bool { return false })
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("a peer that answers no ping was closed after %v, want within keepalive time + timeout (2s) and some slack", d)
	} else {
		t.Logf("attack: a peer that answers no ping: closed after %v", d.Round(100*time.Millisecond))
	}
}
