// Package haproxytest runs the real HAProxy for tests, in front of fake
// repool servers, all on loopback.
//
// A Server is a fake repool server: an HTTP/1-only health port answering
// GET /readyz/active with a status the test sets (200 active, 404 standby,
// 503 not ready) and HAProxy's agent check to match (package agent), and
// an h2c-only "gRPC" port answering every plain HTTP/2 request with the
// server's name, and gRPC calls with a real gRPC server
// (the standard health service) that sends the server's name in its
// ServedByKey header. Start renders a configuration with package haproxy and runs
// "haproxy -f cfg -db" as a child process. Everything started is stopped in
// tb.Cleanup; HAProxy also gets SIGKILL if the test binary dies.
//
// Nothing is skipped: a missing haproxy binary fails the test.
package haproxytest

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/lb/agent"
	"github.com/repool/repool/internal/lb/haproxy"
	"github.com/repool/repool/internal/lb/inventory"
	"github.com/repool/repool/internal/testenv"
)

// WaitFor bounds every wait of this package. Waiting is not a timing
// assertion: with the 100ms checks of LoopbackInventory states settle in well
// under a second.
const WaitFor = 15 * time.Second

// Server is a fake repool server on loopback. SetStatus, Pause and Resume
// are safe for concurrent use.
type Server struct {
	Name     string
	GRPCPort int // h2c only; answers with Name
	// HTTPPort is HTTP/1 only: GET /readyz/active answers the set status.
	// It also answers HAProxy's agent check (package agent): Active for
	// 200, Standby for 404, Down otherwise.
	HTTPPort int
	// Group is the server's group in LoopbackInventory; "" is the default
	// group.
	Group  string
	status atomic.Int32
	paused atomic.Pointer[chan struct{}] // closed by Resume
	tlsCfg *tls.Config
	stop   []func() // stops what Start started
}

// ServedByKey is the header metadata entry in which a Server's gRPC answers
// name the server.
const ServedByKey = "x-served-by"

// NewServer starts a fake server whose health check answers status;
// tb.Cleanup stops it.
func NewServer(tb testing.TB, name string, status int) *Server {
	tb.Helper()
	return newServer(tb, name, status, nil)
}

// NewTLSServer is NewServer with both ports over TLS with cfg (its
// certificate, and client certificates if it asks for them): the health
// port offers http/1.1 by ALPN, the "gRPC" port h2.
func NewTLSServer(tb testing.TB, name string, status int, cfg *tls.Config) *Server {
	tb.Helper()
	return newServer(tb, name, status, cfg)
}

func newServer(tb testing.TB, name string, status int, tlsCfg *tls.Config) *Server {
	tb.Helper()
	s := &Server{Name: name, tlsCfg: tlsCfg}
	s.status.Store(int32(status))
	tb.Cleanup(s.Stop)
	tb.Cleanup(s.Resume)
	s.Start(tb)
	return s
}

// agentTimeout bounds a connection's first bytes on a Server's HTTP port.
const agentTimeout = 5 * time.Second

// answer is the agent check's answer for the set status.
func (s *Server) answer() string {
	s.wait()
	switch st := int(s.status.Load()); st {
	case http.StatusOK:
		return agent.Active
	case http.StatusNotFound:
		return agent.Standby
	default:
		return agent.Down(fmt.Sprintf("status %d", st))
	}
}

// wait blocks while the server is paused.
func (s *Server) wait() {
	if ch := s.paused.Load(); ch != nil {
		<-*ch
	}
}

// Start listens on the server's ports, or on free ports the first time:
// after Stop it is the same server started again, as a restarted process
// would be.
func (s *Server) Start(tb testing.TB) {
	tb.Helper()
	check := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, haproxy.ControlAPI) && r.ProtoMajor == 1 {
			// The control plane, as the control frontend forwards it.
			fmt.Fprint(w, s.Name)
			return
		}
		if r.URL.Path != haproxy.HealthURI || r.ProtoMajor != 1 {
			http.Error(w, "unexpected "+r.Proto+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		s.wait()
		w.WriteHeader(int(s.status.Load()))
	})}
	check.Protocols = new(http.Protocols)
	check.Protocols.SetHTTP1(true)

	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	grpcSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			w.Header().Set(ServedByKey, s.Name)
			gs.ServeHTTP(w, r)
			return
		}
		fmt.Fprint(w, s.Name)
	})}
	grpcSrv.Protocols = new(http.Protocols)
	grpcSrv.Protocols.SetUnencryptedHTTP2(true)
	if s.tlsCfg != nil {
		h := s.tlsCfg.Clone()
		h.NextProtos = []string{"http/1.1"}
		check.TLSConfig = h
		g := s.tlsCfg.Clone()
		g.NextProtos = []string{"h2"}
		grpcSrv.TLSConfig = g
		grpcSrv.Protocols.SetHTTP2(true)
	}

	s.stop = append(s.stop, gs.Stop)
	for _, l := range []struct {
		srv   *http.Server
		port  *int
		agent bool
	}{{check, &s.HTTPPort, true}, {grpcSrv, &s.GRPCPort, false}} {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(*l.port)))
		if err != nil {
			tb.Fatalf("haproxytest: listen on 127.0.0.1:%d = got error %v, want nil", *l.port, err)
		}
		*l.port = ln.Addr().(*net.TCPAddr).Port
		if l.agent {
			ln = agent.Listen(ln, s.answer, agentTimeout)
		}
		if l.srv.TLSConfig != nil {
			ln = tls.NewListener(ln, l.srv.TLSConfig)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			l.srv.Serve(ln)
		}()
		s.stop = append(s.stop, func() {
			l.srv.Close()
			<-done
		})
	}
}

// Stop closes the server's ports and connections, as a killed process
// would. Start starts it again.
func (s *Server) Stop() {
	for _, stop := range s.stop {
		stop()
	}
	s.stop = nil
}

// SetStatus changes what the health check answers.
func (s *Server) SetStatus(status int) { s.status.Store(int32(status)) }

// Pause makes the health check and the agent hold their answers until
// Resume, as a stopped (SIGSTOP) process would: HAProxy's checks time out.
func (s *Server) Pause() {
	ch := make(chan struct{})
	s.paused.Store(&ch)
}

// Resume lets held answers go (SIGCONT). It does nothing if the server is
// not paused.
func (s *Server) Resume() {
	if ch := s.paused.Swap(nil); ch != nil {
		close(*ch)
	}
}

// LoopbackInventory returns an inventory whose HAProxy binds only loopback:
// the VIP is 127.0.0.1 on a free port; LB host lb1 is 127.0.0.2 with its
// monitor frontend on another free port and its stats socket in dir; lb2
// (127.0.0.3) exists only because an inventory needs a VRRP pair. Checks are
// the inventory's defaults, as shipped. Each server is in its Group; the
// tenant map is dir/repool-tenants.map.
func LoopbackInventory(tb testing.TB, dir string, servers ...*Server) *inventory.Inventory {
	tb.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "vip: {address: 127.0.0.1/8, interface: lo, router_id: 1, grpc_port: %d, control_port: %d}\n", testenv.FreePort(tb), testenv.FreePort(tb))
	fmt.Fprintf(&b, "lb_hosts:\n")
	fmt.Fprintf(&b, "  - {name: lb1, address: 127.0.0.2, priority: 150, state: BACKUP, monitor_port: %d, stats_socket: %s}\n",
		testenv.FreePort(tb), filepath.Join(dir, "lb1.sock"))
	fmt.Fprintf(&b, "  - {name: lb2, address: 127.0.0.3, priority: 100, state: BACKUP}\n")
	fmt.Fprintf(&b, "servers:\n")
	for _, s := range servers {
		group := s.Group
		if group == "" {
			group = inventory.DefaultGroup
		}
		fmt.Fprintf(&b, "  - {name: %s, address: 127.0.0.1, grpc_port: %d, http_port: %d, group: %s}\n", s.Name, s.GRPCPort, s.HTTPPort, group)
	}
	// HAProxy stays the test's user: the tests need no haproxy user.
	usr, grp := CurrentUser(tb)
	// and a maxconn whose file descriptors any test machine allows.
	fmt.Fprintf(&b, "haproxy: {user: %s, group: %s, maxconn: 1000, tenant_map: %s}\n", usr, grp, filepath.Join(dir, "repool-tenants.map"))
	inv, err := inventory.Parse(strings.NewReader(b.String()))
	if err != nil {
		tb.Fatalf("haproxytest: inventory.Parse = got error %v, want nil\n%s", err, b.String())
	}
	return inv
}

// CurrentUser returns the names of this process's user and group, for an
// inventory's haproxy.user and haproxy.group.
func CurrentUser(tb testing.TB) (string, string) {
	tb.Helper()
	u, err := user.Current()
	if err != nil {
		tb.Fatalf("haproxytest: current user: %v", err)
	}
	g, err := user.LookupGroupId(u.Gid)
	if err != nil {
		tb.Fatalf("haproxytest: current group: %v", err)
	}
	return u.Username, g.Name
}

// Process is a running HAProxy.
type Process struct {
	Config  []byte           // the rendered haproxy.cfg it runs
	Socket  string           // its stats socket
	Runtime *haproxy.Runtime // connected to Socket
	out     testenv.Output
}

// Output returns what HAProxy printed so far.
func (p *Process) Output() string { return p.out.String() }

// Start renders inv for LB host lb1 (pid file in dir) and runs the real
// HAProxy on it in the foreground, after creating an empty tenant map file
// if inv has more than one group and the file does not exist (HAProxy
// refuses to start without it). It returns once the stats socket
// answers; tb.Cleanup stops HAProxy (SIGTERM, then SIGKILL after 5 s) and
// waits for it. If another process took a port of the VIP or lb1's monitor port
// first, Start moves them (gRPC, control and monitor ports) to fresh free
// ports in inv and tries again.
func Start(tb testing.TB, inv *inventory.Inventory, dir string) *Process {
	tb.Helper()
	for attempt := 1; ; attempt++ {
		p, inUse := start(tb, inv, dir)
		if p != nil {
			return p
		}
		if !inUse || attempt == 3 {
			tb.Fatalf("haproxytest: haproxy did not start")
		}
		inv.VIP.GRPCPort, inv.VIP.ControlPort = testenv.FreePort(tb), testenv.FreePort(tb)
		for i := range inv.LBHosts {
			if inv.LBHosts[i].Name == "lb1" {
				inv.LBHosts[i].MonitorPort = testenv.FreePort(tb)
			}
		}
	}
}

// start makes one attempt. It returns nil and whether a port was in use if
// HAProxy exited, after logging why.
func start(tb testing.TB, inv *inventory.Inventory, dir string) (_ *Process, inUse bool) {
	tb.Helper()
	lb1, err := inv.Host("lb1")
	if err != nil {
		tb.Fatalf("haproxytest: %v", err)
	}
	cfg, err := haproxy.Render(context.Background(), inv, haproxy.Options{Host: "lb1", PIDFile: filepath.Join(dir, "haproxy.pid")})
	if err != nil {
		tb.Fatalf("haproxytest: Render = got error %v, want nil", err)
	}
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		tb.Fatal(err)
	}
	if len(inv.Groups()) > 1 {
		f, err := os.OpenFile(inv.HAProxy.TenantMap, os.O_CREATE|os.O_RDONLY, 0o644)
		if err != nil {
			tb.Fatal(err)
		}
		f.Close()
	}
	p := &Process{Config: cfg, Socket: lb1.StatsSocket}
	cmd := exec.Command(haproxy.DefaultBinary, "-f", path, "-db")
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("haproxytest: start %s = got error %v, want nil", haproxy.DefaultBinary, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second): // another process's grace: real time
			cmd.Process.Kill()
			<-exited
		}
	}
	tb.Cleanup(stop)

	// HAProxy is another process: its start is waited for on real time.
	var exit error
	waited := false
	defer func() {
		if !waited { // Eventually gave up
			tb.Logf("haproxytest: haproxy's output:\n%s", p.Output())
		}
	}()
	testenv.Eventually(tb, WaitFor, "haproxy's stats socket "+p.Socket+" to answer", func() bool {
		select {
		case exit = <-exited:
			stopped = true
			return true
		default:
		}
		if _, err := os.Stat(p.Socket); err != nil {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rt, err := haproxy.Dial(ctx, p.Socket)
		p.Runtime = rt
		return err == nil
	})
	waited = true
	if stopped {
		tb.Logf("haproxytest: haproxy exited early (%v):\n%s", exit, p.Output())
		return nil, strings.Contains(p.Output(), "Address already in use")
	}
	tb.Cleanup(func() { p.Runtime.Close() })
	return p, false
}

// Trio is a running HAProxy in front of three fake servers whose health
// checks answer 200 (Active), 404 (Standby) and 503 (Broken).
type Trio struct {
	Active, Standby, Broken *Server
	Inv                     *inventory.Inventory // its LoopbackInventory
	*Process
}

// StartTrio starts the three servers and HAProxy (Start) in front of them;
// tb.Cleanup stops them.
func StartTrio(tb testing.TB) *Trio {
	tb.Helper()
	t := &Trio{
		Active:  NewServer(tb, "active", http.StatusOK),
		Standby: NewServer(tb, "standby", http.StatusNotFound),
		Broken:  NewServer(tb, "broken", http.StatusServiceUnavailable),
	}
	dir := tb.TempDir()
	t.Inv = LoopbackInventory(tb, dir, t.Active, t.Standby, t.Broken)
	t.Process = Start(tb, t.Inv, dir)
	return t
}

// WaitStatus polls rt until every named server is listed and matches its
// wanted state: a Status ("UP") or a Status and an AdminState
// ("NOLB/drain"). A named server that HAProxy does not list fails tb at the
// deadline like a wrong state.
func WaitStatus(tb testing.TB, rt *haproxy.Runtime, want map[string]string) {
	tb.Helper()
	var last []haproxy.ServerStatus
	defer func() {
		if tb.Failed() {
			tb.Logf("haproxytest: last Servers() = %+v", last)
		}
	}()
	testenv.Eventually(tb, WaitFor, fmt.Sprintf("HAProxy's servers to be %v", want), func() bool {
		servers, err := rt.Servers()
		if err != nil {
			tb.Fatalf("haproxytest: Servers() = got error %v, want nil", err)
		}
		last = servers
		matched := 0
		for _, s := range servers {
			w, care := want[s.Name]
			if !care {
				continue
			}
			got := string(s.Status)
			if strings.Contains(w, "/") {
				got += "/" + string(s.Admin)
			}
			if got == w {
				matched++
			}
		}
		return matched == len(want)
	})
}

// Call makes one gRPC call (grpc.health.v1.Health/Check) through HAProxy's
// gRPC frontend on the VIP, with tenant as x-repool-tenant unless it is
// empty, and returns the name of the server that answered.
func Call(tb testing.TB, inv *inventory.Inventory, tenant string) string {
	tb.Helper()
	target := net.JoinHostPort(inv.VIP.IP().String(), strconv.Itoa(inv.VIP.GRPCPort))
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatalf("haproxytest: grpc.NewClient(%s) = got error %v, want nil", target, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if tenant != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, repoolv1.TenantRouteKey, tenant)
	}
	var header metadata.MD
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header)); err != nil {
		tb.Fatalf("haproxytest: Health/Check via %s (tenant %q) = got error %v, want nil", target, tenant, err)
	}
	by := header.Get(ServedByKey)
	if len(by) != 1 {
		tb.Fatalf("haproxytest: Health/Check via %s (tenant %q) = got header %v, want one %s", target, tenant, header, ServedByKey)
	}
	return by[0]
}

// Control sends one HTTP/1.1 GET of path to HAProxy's control frontend
// on the VIP and returns the status and the body: the name of the server
// that answered when it is 200.
func Control(tb testing.TB, inv *inventory.Inventory, path string) (int, string) {
	tb.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	url := "http://" + net.JoinHostPort(inv.VIP.IP().String(), strconv.Itoa(inv.VIP.ControlPort)) + path
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		tb.Fatalf("haproxytest: GET %s = got error %v, want nil", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// Get sends one h2c request to HAProxy's gRPC frontend on the VIP and
// returns the name of the server that answered.
func Get(tb testing.TB, inv *inventory.Inventory) string {
	tb.Helper()
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	url := "http://" + net.JoinHostPort(inv.VIP.IP().String(), strconv.Itoa(inv.VIP.GRPCPort)) + "/"
	resp, err := c.Get(url)
	if err != nil {
		tb.Fatalf("haproxytest: GET %s = got error %v, want nil", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		tb.Fatalf("haproxytest: GET %s = got %s %s %q (%v), want HTTP/2.0 200", url, resp.Proto, resp.Status, body, err)
	}
	return string(body)
}
