package sidecar_test

import (
	"net"
	"strings"
	"testing"

	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/config"
)

// TestReadyz: /readyz is 200 only when every provider has a valid token and
// a serving upstream, else 503 with the reason per provider; ?provider=
// checks one; /healthz stays liveness (200 whatever the providers).
func TestReadyz(t *testing.T) {
	addr, key := realServer(t)
	// A port nothing listens on: taken, then closed.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	h := start(t, config.Config{Providers: map[string]config.Provider{
		"good":    {Endpoint: addr, APIKey: key},
		"badkey":  {Endpoint: addr, APIKey: "rp_not-a-key"},
		"nowhere": {Endpoint: dead, APIKey: key},
	}}, sidecar.Options{})

	r := h.do("GET", "/readyz", "")
	provs, _ := r.body["providers"].(map[string]any)
	if r.status != 503 || r.body["status"] != "not_ready" || len(provs) != 3 {
		t.Fatalf("readyz = %d %s, want 503 not_ready for three providers", r.status, r.raw)
	}
	good := provs["good"].(map[string]any)
	badkey := provs["badkey"].(map[string]any)
	nowhere := provs["nowhere"].(map[string]any)
	if good["ready"] != true || badkey["ready"] != false || nowhere["ready"] != false {
		t.Fatalf("readiness = %v", provs)
	}
	if reason, _ := badkey["reason"].(string); !strings.Contains(reason, "API key") {
		t.Errorf("bad key reason = %q, want it to name the API key", reason)
	}
	if reason, _ := nowhere["reason"].(string); !strings.Contains(reason, "nothing is listening") && !strings.Contains(reason, "in time") {
		t.Errorf("unreachable reason = %q", reason)
	}
	if r = h.do("GET", "/readyz?provider=good", ""); r.status != 200 || r.body["status"] != "ready" {
		t.Fatalf("readyz?provider=good = %d %s, want 200 ready", r.status, r.raw)
	}
	if r = h.do("GET", "/readyz?provider=badkey", ""); r.status != 503 {
		t.Fatalf("readyz?provider=badkey = %d %s, want 503", r.status, r.raw)
	}
	if r = h.do("GET", "/readyz?provider=zzz", ""); r.status != 404 || r.errCode() != "unknown_provider" {
		t.Fatalf("readyz?provider=zzz = %d %s, want 404 unknown_provider", r.status, r.raw)
	}
	if r = h.do("GET", "/readyz?x=1", ""); r.status != 400 {
		t.Fatalf("readyz?x=1 = %d %s, want 400", r.status, r.raw)
	}
	if r = h.do("GET", "/healthz", ""); r.status != 200 {
		t.Fatalf("healthz = %d %s, want 200 (liveness)", r.status, r.raw)
	}
}
