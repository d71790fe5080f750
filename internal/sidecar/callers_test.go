package sidecar_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/config"
	"github.com/repool/repool/internal/sidecar/fakeserver"
)

// send makes one request with the given Host and headers and returns the
// status and the error code.
func (h *harness) send(method, path, host string, header map[string]string, body string) (int, string) {
	h.t.Helper()
	r := h.request(method, path, host, header, body)
	return r.status, r.errCode()
}

// upstreamCalls is every call the fake server received.
func upstreamCalls(fake *fakeserver.Server) int64 {
	var n int64
	for _, m := range []string{"IssueToken", "Register", "Deregister", "Acquire", "Renew", "Release", "Report", "SubscribeEvents"} {
		n += fake.Calls(m)
	}
	return n
}

const jsonType = "application/json"

func TestHostMustNameTheSidecar(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{})
	cfg := one("p", fast(fake))
	cfg.AllowedHosts = []string{"sidecar.internal", "10.1.2.3"}
	h := start(t, cfg, sidecar.Options{})
	port := h.s.Addr()[strings.LastIndex(h.s.Addr(), ":"):]
	tests := []struct {
		host string
		want int
	}{
		{"127.0.0.1" + port, 200},
		{"127.0.0.1", 200},
		{"127.8.9.10" + port, 200},
		{"localhost" + port, 200},
		{"LOCALHOST" + port, 200},
		{"localhost.", 200},
		{"[::1]" + port, 200},
		{"[::ffff:127.0.0.1]" + port, 200},
		{"sidecar.internal" + port, 200},
		{"SIDECAR.INTERNAL.", 200},
		{"10.1.2.3" + port, 200},
		{"evil.example" + port, 403},
		{"evil.example", 403},
		{"localhost.evil.example" + port, 403},
		{"127.0.0.1.nip.io" + port, 403},
		{"sidecar.internal.evil.example", 403},
		{"10.1.2.4" + port, 403},
		{"[::2]" + port, 403},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			h.t = t
			before := upstreamCalls(fake)
			status, code := h.send("POST", "/v1/providers/p/acquire", tt.host, map[string]string{"Content-Type": jsonType}, `{"context":"c","ttl_seconds":30}`)
			if status != tt.want {
				t.Fatalf("acquire with Host %q = got %d %s, want %d", tt.host, status, code, tt.want)
			}
			if tt.want == 403 {
				if code != "forbidden_host" {
					t.Errorf("acquire with Host %q: code = got %q, want forbidden_host", tt.host, code)
				}
				if n := upstreamCalls(fake) - before; n != 0 {
					t.Errorf("acquire with Host %q refused after %d upstream calls, want 0", tt.host, n)
				}
			}
		})
	}
	// Health and metrics are behind the same rule: a rebound page reads
	// nothing.
	for _, path := range []string{"/healthz", "/metrics", "/v1/breakers"} {
		if status, code := h.send("GET", path, "evil.example"+port, nil, ""); status != 403 || code != "forbidden_host" {
			t.Errorf("GET %s with Host evil.example = got %d %s, want 403 forbidden_host", path, status, code)
		}
	}
}

func TestOriginIsRefusedUnlessAllowed(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{})
	cfg := one("p", fast(fake))
	cfg.AllowedOrigins = []string{"https://App.Example:8443"}
	h := start(t, cfg, sidecar.Options{})
	tests := []struct {
		name   string
		header map[string]string
		want   int
	}{
		{"no Origin", nil, 200},
		{"allowed origin", map[string]string{"Origin": "https://app.example:8443"}, 200},
		{"allowed origin, cross-site fetch", map[string]string{"Origin": "https://app.example:8443", "Sec-Fetch-Site": "cross-site"}, 200},
		{"other origin", map[string]string{"Origin": "http://evil.example"}, 403},
		{"allowed host, other port", map[string]string{"Origin": "https://app.example"}, 403},
		{"allowed host, other scheme", map[string]string{"Origin": "http://app.example:8443"}, 403},
		{"null origin", map[string]string{"Origin": "null"}, 403},
		{"empty Origin header", map[string]string{"Origin": ""}, 403},
		{"a loopback page", map[string]string{"Origin": "http://127.0.0.1:8080"}, 403},
		{"cross-site without Origin", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"same-site without Origin", map[string]string{"Sec-Fetch-Site": "same-site"}, 403},
		{"typed into the address bar", map[string]string{"Sec-Fetch-Site": "none"}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.t = t
			header := map[string]string{"Content-Type": jsonType}
			for k, v := range tt.header {
				header[k] = v
			}
			before := upstreamCalls(fake)
			status, code := h.send("POST", "/v1/providers/p/acquire", "", header, `{"context":"c","ttl_seconds":30}`)
			if status != tt.want || (tt.want == 403 && code != "forbidden_origin") {
				t.Fatalf("acquire with %v = got %d %s, want %d", tt.header, status, code, tt.want)
			}
			if n := upstreamCalls(fake) - before; tt.want == 403 && n != 0 {
				t.Errorf("acquire with %v refused after %d upstream calls, want 0", tt.header, n)
			}
		})
	}
	// A preflight carries the Origin too: nothing answers it with CORS
	// headers, so a browser never sends the request it asks about.
	if status, code := h.send("OPTIONS", "/v1/providers/p/acquire", "", map[string]string{
		"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}, ""); status != 403 || code != "forbidden_origin" {
		t.Errorf("CORS preflight from evil.example = got %d %s, want 403 forbidden_origin", status, code)
	}
}

func TestRequestBodiesMustBeJSON(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{})
	h := start(t, one("p", fast(fake)), sidecar.Options{})
	const acquire = `{"context":"c","ttl_seconds":30}`
	tests := []struct {
		name, method, path, contentType, body string
		want                                  int
	}{
		{"JSON", "POST", "/v1/providers/p/acquire", jsonType, acquire, 200},
		{"JSON, UTF-8", "POST", "/v1/providers/p/acquire", "application/json; charset=UTF-8", acquire, 200},
		{"JSON, another charset", "POST", "/v1/providers/p/acquire", "application/json; charset=latin1", acquire, 415},
		{"JSON with another parameter", "POST", "/v1/providers/p/acquire", "application/json; boundary=x", acquire, 415},
		{"text/plain, as a browser's simple POST", "POST", "/v1/providers/p/acquire", "text/plain", acquire, 415},
		{"a form", "POST", "/v1/providers/p/acquire", "application/x-www-form-urlencoded", acquire, 415},
		{"multipart", "POST", "/v1/providers/p/acquire", "multipart/form-data; boundary=x", acquire, 415},
		{"JSON-like", "POST", "/v1/providers/p/acquire", "application/json-seq", acquire, 415},
		{"not a media type", "POST", "/v1/providers/p/acquire", "json", acquire, 415},
		{"no Content-Type", "POST", "/v1/providers/p/acquire", "", acquire, 415},
		{"no Content-Type, no body", "POST", "/v1/providers/p/acquire", "", "", 415},
		{"JSON, no body", "POST", "/v1/providers/p/acquire", jsonType, "", 400},
		{"GET without a body", "GET", "/v1/breakers", "", "", 200},
		{"DELETE without a body", "DELETE", "/v1/providers/p/resources/r1", "", "", 200},
		{"DELETE with a text body", "DELETE", "/v1/providers/p/resources/r1", "text/plain", "x", 415},
		{"GET with a JSON body", "GET", "/v1/breakers", jsonType, "{}", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.t = t
			header := map[string]string{}
			if tt.contentType != "" {
				header["Content-Type"] = tt.contentType
			}
			before := upstreamCalls(fake)
			status, code := h.send(tt.method, tt.path, "", header, tt.body)
			if status != tt.want {
				t.Fatalf("%s %s with Content-Type %q = got %d %s, want %d", tt.method, tt.path, tt.contentType, status, code, tt.want)
			}
			if tt.want == 415 {
				if code != "unsupported_media_type" {
					t.Errorf("%s %s: code = got %q, want unsupported_media_type", tt.method, tt.path, code)
				}
				if n := upstreamCalls(fake) - before; n != 0 {
					t.Errorf("%s %s refused after %d upstream calls, want 0", tt.method, tt.path, n)
				}
			}
		})
	}
}

// TestBrowserCrossOriginSimplePostChangesNothing is what a page on any site
// can send to 127.0.0.1 without a CORS preflight, as Chromium sends it:
// text/plain, Origin and Sec-Fetch-Site. And the same page after DNS
// rebinding, where it is same-origin with its own name. Nothing reaches the
// provider and its breaker counts nothing.
func TestBrowserCrossOriginSimplePostChangesNothing(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{})
	h := start(t, one("p", fast(fake)), sidecar.Options{})
	port := h.s.Addr()[strings.LastIndex(h.s.Addr(), ":"):]
	attacks := []struct {
		name, path, host, body string
		header                 map[string]string
	}{
		{"register from evil.example", "/v1/providers/p/resources", "", `{"resources":[{"id":"mine"}]}`,
			map[string]string{"Content-Type": "text/plain;charset=UTF-8", "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}},
		{"acquire from evil.example", "/v1/providers/p/acquire", "", `{"context":"c","ttl_seconds":3600}`,
			map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}},
		{"report BLOCKED, form-encoded", "/v1/providers/p/reports", "", `{"resource_id":"proxy-1","context":"c","outcome":"BLOCKED"}`,
			map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "http://evil.example"}},
		{"register after DNS rebinding", "/v1/providers/p/resources", "evil.example" + port, `{"resources":[{"id":"mine"}]}`,
			map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.example" + port, "Sec-Fetch-Site": "same-origin"}},
		{"acquire after DNS rebinding, JSON", "/v1/providers/p/acquire", "evil.example" + port, `{"context":"c","ttl_seconds":3600}`,
			map[string]string{"Content-Type": jsonType, "Origin": "http://evil.example" + port, "Sec-Fetch-Site": "same-origin"}},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			h.t = t
			if status, code := h.send("POST", a.path, a.host, a.header, a.body); status != 403 && status != 415 {
				t.Fatalf("%s = got %d %s, want 403 or 415", a.name, status, code)
			}
		})
	}
	if n := upstreamCalls(fake); n != 0 {
		t.Errorf("upstream calls after the attacks = got %d, want 0", n)
	}
	b := h.breaker("p")
	if b["state"] != "closed" || b["counts"].(map[string]any)["requests"] != 0.0 {
		t.Errorf("breaker after the attacks = got %v, want closed with nothing counted", b)
	}
	// The backend itself is still served.
	if r := h.do("POST", "/v1/providers/p/acquire", `{"context":"c","ttl_seconds":30}`); r.status != 200 {
		t.Errorf("a backend's acquire after the attacks = got %d %s, want 200", r.status, r.raw)
	}
}

func TestUnixSocketPermissions(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{})
	tests := []struct {
		name, group string
		mode        os.FileMode
	}{
		{"owner only", "", 0o600},
		{"with a group", "0", 0o660},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sidecar.sock")
			cfg := one("p", fast(fake))
			cfg.Listen, cfg.UnixSocketGroup = "unix:"+path, tt.group
			h := start(t, cfg, sidecar.Options{})
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatalf("Stat(%s) = got error %v, want the socket", path, err)
			}
			if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != tt.mode {
				t.Errorf("socket mode = got %v, want a socket with %v", fi.Mode(), tt.mode)
			}
			if tt.group != "" && fi.Sys().(*syscall.Stat_t).Gid != 0 {
				t.Errorf("socket group = got %d, want 0", fi.Sys().(*syscall.Stat_t).Gid)
			}
			entries, _ := os.ReadDir(filepath.Dir(path))
			if len(entries) != 1 {
				t.Errorf("directory of the socket holds %d entries, want only the socket (no temporary directory left)", len(entries))
			}
			h.base = "http://localhost"
			h.client = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", path)
			}}}
			if r := h.acquire("p"); r.status != 200 {
				t.Fatalf("acquire over the unix socket = got %d %s, want 200", r.status, r.raw)
			}
			h.stop()
			if _, err := os.Lstat(path); !os.IsNotExist(err) {
				t.Errorf("socket after the sidecar stopped: Lstat = got %v, want it removed", err)
			}
		})
	}
	// A file that is not a socket is never replaced.
	path := filepath.Join(t.TempDir(), "not-a-socket")
	if err := os.WriteFile(path, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := one("p", fast(fake))
	cfg.Listen = "unix:" + path
	if s, err := sidecar.New(cfg, sidecar.Options{}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("sidecar.New(listen on a regular file) = got %v, want an error saying it is not a socket", err)
	}
	if raw, _ := os.ReadFile(path); string(raw) != "data" {
		t.Errorf("the regular file = got %q, want it untouched", raw)
	}
	// An unknown group is refused.
	cfg.Listen, cfg.UnixSocketGroup = "unix:"+filepath.Join(t.TempDir(), "s.sock"), "no-such-group-repool"
	if s, err := sidecar.New(cfg, sidecar.Options{}); err == nil || !strings.Contains(err.Error(), "unix_socket_group") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("sidecar.New(unknown group) = got %v, want an error naming unix_socket_group", err)
	}
}

// TestBadRequestsNeverTripTheBreaker: a backend that floods provider p
// with requests the sidecar refuses or cannot encode gets its 4xx, and p's
// breaker counts none of them: it stays closed, and another backend's
// calls to p and to q go through. (A path that is not UTF-8 was once
// answered 502 and counted as p's failure.)
func TestBadRequestsNeverTripTheBreaker(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{})
	other := fakeserver.Start(t, fakeserver.Config{})
	cfg := config.Config{MaxBodyBytes: 4096, Providers: map[string]config.Provider{"p": fast(fake), "q": fast(other)}}
	h := start(t, cfg, sidecar.Options{})
	big := `{"context":"` + strings.Repeat("x", 5000) + `","ttl_seconds":30}`
	bad := []struct {
		method, path, contentType, body string
		want                            int
	}{
		{"DELETE", "/v1/providers/p/resources/%FF%FE", "", "", 400},
		{"POST", "/v1/providers/p/leases/%C3%28/renew", jsonType, `{"fencing_token":"1","ttl_seconds":30}`, 400},
		{"POST", "/v1/providers/p/leases/%80/release", jsonType, `{"fencing_token":"1"}`, 400},
		{"POST", "/v1/providers/p/acquire", jsonType, "{\"context\":\"\xff\",\"ttl_seconds\":30}", 400},
		{"POST", "/v1/providers/p/acquire", jsonType, `{"context":"\ud800","ttl_seconds":30}`, 400},
		{"POST", "/v1/providers/p/acquire", jsonType, `{"context":`, 400},
		{"POST", "/v1/providers/p/acquire", jsonType, `{"context":"c","ttl_seconds":30,"x":1}`, 400},
		{"POST", "/v1/providers/p/acquire", jsonType, big, 413},
		{"POST", "/v1/providers/p/acquire", "text/plain", `{"context":"c","ttl_seconds":30}`, 415},
		{"POST", "/v1/providers/p/reports", jsonType, `{"resource_id":"r","context":"c","outcome":"MAYBE"}`, 400},
		{"POST", "/v1/providers/p/leases/l1/release", jsonType, `{"lease_id":"l2","fencing_token":"1"}`, 400},
	}
	for round := range 20 {
		for _, b := range bad {
			header := map[string]string{}
			if b.contentType != "" {
				header["Content-Type"] = b.contentType
			}
			if status, code := h.send(b.method, b.path, "", header, b.body); status != b.want {
				t.Fatalf("round %d: %s %s = got %d %s, want %d", round, b.method, b.path, status, code, b.want)
			}
		}
	}
	if n := upstreamCalls(fake); n != 0 {
		t.Errorf("upstream calls of p after %d bad requests = got %d, want 0", 20*len(bad), n)
	}
	br := h.breaker("p")
	counts := br["counts"].(map[string]any)
	if br["state"] != "closed" || counts["failures"] != 0.0 || counts["requests"] != 0.0 {
		t.Fatalf("breaker of p after %d bad requests = got %v, want closed with nothing counted", 20*len(bad), br)
	}
	for _, p := range []string{"p", "q"} {
		if r := h.acquire(p); r.status != 200 {
			t.Errorf("another backend's acquire on %s = got %d %s, want 200", p, r.status, r.raw)
		}
	}
}
