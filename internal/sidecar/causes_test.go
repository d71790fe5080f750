package sidecar_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/config"
	"github.com/repool/repool/internal/testenv"
)

// TestCausesShown: a provider that cannot be used says why, in our words,
// from the first failed call on — in the call's error, in /v1/breakers'
// last trip and in /readyz: nothing listening at the address, an endpoint
// that answers HTTP/1.1 (a server's HTTP port), and a gRPC server that is
// not a repool server are three different answers, none "Unknown".
func TestCausesShown(t *testing.T) {
	closed := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	web := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(web.Close)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bare := grpc.NewServer() // serves no repool service
	go func() { _ = bare.Serve(lis) }()
	t.Cleanup(bare.Stop)

	for _, tc := range []struct {
		name, endpoint, want string
	}{
		{"nothing listening", closed, "connection refused by " + closed + ": nothing is listening there"},
		{"an HTTP port", strings.TrimPrefix(web.URL, "http://"), "not a gRPC server: the endpoint answers HTTP/1.1"},
		{"not a repool server", lis.Addr().String(), "not a repool server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, config.Config{Providers: map[string]config.Provider{"p": {Endpoint: tc.endpoint, APIKey: "rpk_x"}}}, sidecar.Options{})
			r := h.acquire("p")
			if r.status < 500 || !strings.Contains(r.errField("message"), tc.want) {
				t.Fatalf("first call = %d %s, want a 5xx whose message says %q", r.status, r.raw, tc.want)
			}
			ready := h.do("GET", "/readyz?provider=p", "")
			if ready.status != 503 || !strings.Contains(string(ready.raw), tc.want) {
				t.Fatalf("/readyz = %d %s, want 503 saying %q", ready.status, ready.raw, tc.want)
			}
			if tc.name == "not a repool server" {
				return // refused at once (UNIMPLEMENTED is not retried): no trip to show
			}
			testenv.Eventually(t, 10*time.Second, "the breaker to open", func() bool { return h.breaker("p")["state"] == "open" })
			trip, _ := h.breaker("p")["last_trip"].(map[string]any)
			if reason, _ := trip["reason"].(string); !strings.Contains(reason, tc.want) || strings.Contains(reason, "Unknown") {
				t.Fatalf("/v1/breakers last trip %v, want its reason to say %q", trip, tc.want)
			}
		})
	}
}
