package sidecar_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/config"
	"github.com/repool/repool/internal/testenv"
)

// TestStatusPage: the status page shows a provider that cannot be reached
// with its breaker open, the cause in words and its fast failures, and is
// refused to another site like every route (test/statuspages loads it in
// Chromium against the real binaries).
func TestStatusPage(t *testing.T) {
	closed := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	h := start(t, config.Config{Providers: map[string]config.Provider{"down": {Endpoint: closed, APIKey: "rpk_x"}}}, sidecar.Options{})
	h.acquire("down")
	testenv.Eventually(t, 10*time.Second, "the breaker to open", func() bool {
		h.acquire("down")
		return h.breaker("down")["state"] == "open"
	})
	r := h.do("GET", "/status", "")
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /status = %d %s, want an HTML page", r.status, r.header.Get("Content-Type"))
	}
	for _, want := range []string{`<td class="bad">open`, "connection refused by " + closed + ": nothing is listening there", "none held yet", "100.0 %"} {
		if !strings.Contains(r.raw, want) {
			t.Errorf("the page does not say %q:\n%s", want, r.raw)
		}
	}
	if strings.Contains(r.raw, "<script") {
		t.Errorf("the page holds a script:\n%s", r.raw)
	}
	if r := h.request("GET", "/status", "", map[string]string{"Origin": "http://evil.example"}, ""); r.status != 403 {
		t.Errorf("GET /status from another site = %d, want 403", r.status)
	}
}
