// Package abuse runs the attacks of issue 15 against the real binaries:
// cmd/server and cmd/sidecar built into a temporary directory, started on
// free loopback ports with SQLite in a temporary directory, and driven over
// the network the way an attacker (a web page, a greedy tenant, a flood of
// bad or slow clients, an unauthenticated scraper) would. Every promise has
// an attack here that fails if the promise breaks.
package abuse

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/testenv"
)

// binaries are the built commands.
type binaries struct{ server, sidecar string }

// build compiles cmd/server and cmd/sidecar into a temporary directory of
// t.
func build(t *testing.T) binaries {
	t.Helper()
	dir := t.TempDir()
	b := binaries{server: filepath.Join(dir, "server"), sidecar: filepath.Join(dir, "sidecar")}
	for pkg, out := range map[string]string{"github.com/repool/repool/cmd/server": b.server, "github.com/repool/repool/cmd/sidecar": b.sidecar} {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		if raw, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s = got error %v, want nil:\n%s", pkg, err, raw)
		}
	}
	return b
}

// proc is a running binary; its output is kept and shown if the test
// fails. The test's end stops it (SIGTERM, then SIGKILL after 10s).
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *testenv.Output
	done chan struct{}
}

func run(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), out: &testenv.Output{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s = got error %v, want nil", name, err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("===== %s output (secrets hidden) =====\n%s", name, secretRE.ReplaceAllString(p.out.String(), "<secret>"))
		}
	})
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// fds is the number of the process's open file descriptors.
func (p *proc) fds(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.pid()))
	if err != nil {
		t.Fatalf("reading the descriptors of %s = got error %v, want nil", p.name, err)
	}
	return len(entries)
}

// server is a running cmd/server with the secrets of its first start.
type server struct {
	*proc
	bins       binaries
	store      string // the store URL
	grpcAddr   string
	httpAddr   string // as bound
	httpURL    string // its base URL
	key, token string // the demo tenant's API key and the operator token
}

var (
	// secretRE matches API keys and bearer tokens in a process's output.
	secretRE = regexp.MustCompile(`rpk_[A-Za-z0-9_-]+|eyJ[A-Za-z0-9_.-]+`)
	keyRE    = regexp.MustCompile(`demo API key:\s+(\S+)`)
	tokenRE  = regexp.MustCompile(`operator token:\s+(\S+)`)
)

// startServer runs cmd/server on free loopback ports (the HTTP port on the
// address httpHost if not empty) with SQLite in a temporary directory, with
// more flags, and waits until it is ready.
func startServer(t *testing.T, bins binaries, httpHost string, flags ...string) *server {
	t.Helper()
	if httpHost == "" {
		httpHost = "127.0.0.1"
	}
	httpPort := testenv.FreePort(t)
	s := &server{
		bins:     bins,
		store:    "sqlite:" + filepath.Join(t.TempDir(), "repool.db"),
		grpcAddr: fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)),
		httpAddr: net.JoinHostPort(httpHost, fmt.Sprint(httpPort)),
		httpURL:  "http://" + net.JoinHostPort(httpHost, fmt.Sprint(httpPort)),
	}
	args := append([]string{"run", "--grpc-addr", s.grpcAddr, "--http-addr", s.httpAddr, "--store", s.store,
		"--checkpoint-interval", "1h", "--log-level", "warn"}, flags...)
	s.proc = run(t, "server", bins.server, args...)
	testenv.Eventually(t, 30*time.Second, "the server to be ready", func() bool {
		if s.exited() {
			t.Fatalf("the server exited:\n%s", s.out.String())
		}
		resp, err := http.Get(s.httpURL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		// The banner is printed before the server answers, but reaches
		// this process through a pipe: wait for it too.
		return resp.StatusCode == 200 && tokenRE.MatchString(s.out.String())
	})
	out := s.out.String()
	k, tok := keyRE.FindStringSubmatch(out), tokenRE.FindStringSubmatch(out)
	if k == nil || tok == nil {
		t.Fatalf("the server's first start printed no demo key or operator token:\n%s", out)
	}
	s.key, s.token = k[1], tok[1]
	return s
}

// adminToken mints a control-plane token with cmd/server admin-token on
// the server's store.
func (s *server) adminToken(t *testing.T, role, tenant string) string {
	t.Helper()
	args := []string{"admin-token", "--store", s.store, "--role", role}
	if tenant != "" {
		args = append(args, "--tenant", tenant)
	}
	cmd := exec.Command(s.bins.server, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("server admin-token --role %s = got error %v, want nil: %s", role, err, stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// control calls the control plane with the bearer token and returns the
// status and the body.
func (s *server) control(t *testing.T, method, path, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.httpURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s = got error %v, want an answer", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// newTenant creates a tenant with one API key through the control plane
// and returns the key.
func (s *server) newTenant(t *testing.T, id string) string {
	t.Helper()
	if code, body := s.control(t, "POST", "/api/v1/tenants", s.token, `{"id":"`+id+`","name":"`+id+`"}`); code != 201 {
		t.Fatalf("creating tenant %s = got %d %s, want 201", id, code, body)
	}
	code, body := s.control(t, "POST", "/api/v1/tenants/"+id+"/keys", s.token, `{"name":"k"}`)
	var k struct{ Key string }
	if code != 201 || json.Unmarshal([]byte(body), &k) != nil || k.Key == "" {
		t.Fatalf("creating a key of %s = got %d %s, want 201 with a key", id, code, body)
	}
	return k.Key
}

// pool returns a PoolService client of the server; the test's end closes
// it.
func (s *server) pool(t *testing.T) repoolv1.PoolServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return repoolv1.NewPoolServiceClient(conn)
}

// withKey is a call context with an API key.
func withKey(key string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
}

// sidecar is a running cmd/sidecar with one provider, default, on a
// server.
type sidecar struct {
	*proc
	addr string // host:port or unix:/path
	base string // http://host:port/v1/providers/default
}

// startSidecar runs cmd/sidecar in front of srv with more top-level YAML
// (listen: overrides the free loopback port) and waits until it answers.
func startSidecar(t *testing.T, bins binaries, srv *server, extraYAML string) *sidecar {
	t.Helper()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "demo.key")
	if err := os.WriteFile(keyFile, []byte(srv.key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	if m := regexp.MustCompile(`(?m)^listen: (\S+)$`).FindStringSubmatch(extraYAML); m != nil {
		listen = m[1]
	} else {
		extraYAML = "listen: " + listen + "\n" + extraYAML
	}
	cfg := extraYAML + fmt.Sprintf("providers:\n  default:\n    endpoint: %s\n    api_key_file: %s\n", srv.grpcAddr, keyFile)
	path := filepath.Join(dir, "sidecar.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	sc := &sidecar{proc: run(t, "sidecar", bins.sidecar, "--config", path), addr: listen, base: "http://" + listen + "/v1/providers/default"}
	if strings.HasPrefix(listen, "unix:") {
		testenv.Eventually(t, 30*time.Second, "the sidecar's socket", func() bool {
			if sc.exited() {
				t.Fatalf("the sidecar exited:\n%s", sc.out.String())
			}
			_, err := os.Stat(strings.TrimPrefix(listen, "unix:"))
			return err == nil
		})
		return sc
	}
	testenv.Eventually(t, 30*time.Second, "the sidecar to answer /healthz", func() bool {
		if sc.exited() {
			t.Fatalf("the sidecar exited:\n%s", sc.out.String())
		}
		resp, err := http.Get("http://" + listen + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return sc
}

// request sends one HTTP request with the given headers (Host among them)
// and returns the status and the body.
func request(t *testing.T, client *http.Client, method, url, body string, header map[string]string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s = got error %v, want an answer", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// jsonHeader is what a backend sends with a body.
var jsonHeader = map[string]string{"Content-Type": "application/json"}

// errorCode returns error.code of a JSON error body.
func errorCode(body string) string {
	var b struct{ Error struct{ Code string } }
	json.Unmarshal([]byte(body), &b)
	return b.Error.Code
}

// breaker returns the provider's entry of GET /v1/breakers.
func (sc *sidecar) breaker(t *testing.T) map[string]any {
	t.Helper()
	code, body := request(t, http.DefaultClient, "GET", "http://"+sc.addr+"/v1/breakers", "", nil)
	var v struct{ Breakers []map[string]any }
	if code != 200 || json.Unmarshal([]byte(body), &v) != nil || len(v.Breakers) != 1 {
		t.Fatalf("GET /v1/breakers = got %d %s, want one breaker", code, body)
	}
	return v.Breakers[0]
}

// nonLoopbackIPv4 returns an IPv4 address of this host that is not
// loopback, for attacks that must come from one.
func nonLoopbackIPv4(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatalf("net.InterfaceAddrs() = got error %v, want nil", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Fatal("this host has no IPv4 address besides loopback; the metrics attack must come from one")
	return ""
}

// median and quantile of durations.
func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

// readLine reads the first line a connection answers, or "" at EOF.
func readLine(c net.Conn) string {
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}
