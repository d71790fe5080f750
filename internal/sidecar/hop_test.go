package sidecar_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/fakeserver"
	"github.com/repool/repool/internal/testenv"
)

// TestHTTPHopAnswers puts a real HAProxy between the sidecar and the
// server, as the VIP does: its own 503 (no server usable, without the
// cluster-down rule: a handover's answer) is retried past max_retries until
// max_elapsed; its 504 (server timeout) is a timeout and is not retried.
func TestHTTPHopAnswers(t *testing.T) {
	t.Run("503 from the proxy is retried until max_elapsed", func(t *testing.T) {
		dead := net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t))) // nothing listens
		pc := fast(fakeserver.Start(t, fakeserver.Config{}))
		pc.Endpoint = haproxy(t, dead, 30*time.Second)
		pc.Retry.MaxElapsed = 300 * time.Millisecond
		h := start(t, one("p", pc), sidecar.Options{})
		began := time.Now()
		r := h.acquire("p")
		took := time.Since(began)
		if r.status != 503 || r.errCode() != "unavailable" || r.header.Get("X-Repool-Fast-Fail") != "upstream" {
			t.Fatalf("acquire with no server behind the proxy = %d %s, want 503 unavailable (upstream)", r.status, r.raw)
		}
		if got := h.metric("repool_sidecar_retries_total", nil); got <= float64(pc.Retry.MaxRetries) {
			t.Fatalf("retries = got %v, want more than max_retries %d", got, pc.Retry.MaxRetries)
		}
		if took < pc.Retry.MaxElapsed-pc.Retry.MaxInterval {
			t.Fatalf("the call failed after %v, want it to retry for max_elapsed %v", took, pc.Retry.MaxElapsed)
		}
	})
	t.Run("504 from the proxy is a timeout, not retried", func(t *testing.T) {
		fake := fakeserver.Start(t, fakeserver.Config{
			Acquire: func(ctx context.Context, _ *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error) {
				select {
				case <-time.After(time.Second):
				case <-ctx.Done():
				}
				return &repoolv1.AcquireResponse{}, nil
			},
		})
		pc := fast(fake)
		pc.Endpoint = haproxy(t, fake.Addr(), 100*time.Millisecond)
		h := start(t, one("p", pc), sidecar.Options{})
		r := h.acquire("p")
		if r.status != 504 || r.errCode() != "deadline_exceeded" || r.header.Get("X-Repool-Fast-Fail") != "timeout" {
			t.Fatalf("acquire timed out by the proxy = %d %s, want 504 deadline_exceeded (timeout)", r.status, r.raw)
		}
		if got := fake.Calls("Acquire"); got != 1 {
			t.Fatalf("Acquire calls = got %d, want 1 (not retried)", got)
		}
	})
}
