package agent

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// serve runs an HTTP server answering "http" on Listen(127.0.0.1:0) with
// answer; tb.Cleanup closes it.
func serve(tb testing.TB, answer string) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "http") })}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(Listen(ln, func() string { return answer }, 5*time.Second))
	}()
	tb.Cleanup(func() {
		srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// agentCheck does what HAProxy's agent check does: connect, send Hello,
// read a line.
func agentCheck(tb testing.TB, addr string) string {
	tb.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		tb.Fatalf("dial %s = got error %v, want nil", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, Hello); err != nil {
		tb.Fatalf("send Hello = got error %v, want nil", err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		tb.Fatalf("agent answer = got %q, error %v, want a line", line, err)
	}
	return line
}

// TestListen: an agent check gets the answer and a line end, and HTTP
// requests on the same port still reach the HTTP server, before and after.
func TestListen(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after serve's cleanup
	addr := serve(t, Standby)
	get := func() {
		t.Helper()
		resp, err := (&http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + addr + "/")
		if err != nil {
			t.Fatalf("GET = got error %v, want nil", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "http" {
			t.Errorf("GET = got %q, want %q", body, "http")
		}
	}
	get()
	for range 3 {
		if got := agentCheck(t, addr); got != Standby+"\n" {
			t.Errorf("agent check = got %q, want %q", got, Standby+"\n")
		}
	}
	get()
}

// TestListenNotAgent: a connection that starts like Hello but is not it
// gets nothing and is closed; a silent one does not hold up others.
func TestListenNotAgent(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after serve's cleanup
	addr := serve(t, Active)
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "repool-agenX")
	if b, err := io.ReadAll(c); len(b) != 0 || err != nil {
		t.Errorf("after a wrong hello = got %q (%v), want the connection closed with nothing", b, err)
	}
	if got := agentCheck(t, addr); got != Active+"\n" {
		t.Errorf("agent check beside a silent connection = got %q, want %q", got, Active+"\n")
	}
}

func TestDown(t *testing.T) {
	if got, want := Down("store not writable:\ndisk full\r"), "down # store not writable: disk full "; got != want {
		t.Errorf("Down = got %q, want %q", got, want)
	}
	if strings.ContainsAny(Down("a\nb"), "\r\n") {
		t.Error("Down kept a line end")
	}
}
