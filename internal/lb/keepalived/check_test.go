package keepalived

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock advances only when Check sleeps.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.now = c.now.Add(d)
	return ctx.Err()
}

// monitor is an HAProxy monitor that answers 200 to the first ok
// requests and then fail (if not 0); it counts the requests.
func monitor(t *testing.T, ok int64, fail int) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) > ok && fail != 0 {
			w.WriteHeader(fail)
			return
		}
		w.Write([]byte("<html><body><h1>200 OK</h1>Service ready.</body></html>"))
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func TestCheckRunsForItsTimeThenSucceeds(t *testing.T) {
	srv, n := monitor(t, 0, 0)
	err := Check{URL: srv.URL, For: 800 * time.Millisecond, Every: 100 * time.Millisecond, Timeout: time.Second, Clock: &fakeClock{now: time.Unix(0, 0)}}.Run(context.Background())
	if err != nil {
		t.Fatalf("Check on a healthy monitor = got error %v, want nil", err)
	}
	// At 0, 100, ..., 700 ms: the next one, at 800 ms, is past For.
	if got := n.Load(); got != 8 {
		t.Errorf("requests = %d, want 8 (every 100ms for 800ms)", got)
	}
}

func TestCheckFailsAtTheFirstBadAnswer(t *testing.T) {
	srv, n := monitor(t, 3, http.StatusServiceUnavailable)
	err := Check{URL: srv.URL, For: 800 * time.Millisecond, Every: 100 * time.Millisecond, Timeout: time.Second, Clock: &fakeClock{now: time.Unix(0, 0)}}.Run(context.Background())
	if !errors.Is(err, ErrCheck) || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "check 4") {
		t.Fatalf("Check on a monitor failing at its 4th answer = got error %v, want ErrCheck naming check 4 and the 503", err)
	}
	if got := n.Load(); got != 4 {
		t.Errorf("requests = %d, want 4: none after the first failure", got)
	}
}

func TestCheckFailsWhenHAProxyIsGone(t *testing.T) {
	srv, _ := monitor(t, 0, 0)
	url := srv.URL
	srv.Close()
	err := Check{URL: url, For: 800 * time.Millisecond, Every: 100 * time.Millisecond, Timeout: time.Second, Clock: &fakeClock{now: time.Unix(0, 0)}}.Run(context.Background())
	if !errors.Is(err, ErrCheck) || !strings.Contains(err.Error(), "check 1") {
		t.Fatalf("Check on a closed port = got error %v, want ErrCheck at check 1", err)
	}
}

func TestCheckFailsOnASlowAnswer(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	err := Check{URL: srv.URL, For: 800 * time.Millisecond, Every: 100 * time.Millisecond, Timeout: 20 * time.Millisecond, Clock: &fakeClock{now: time.Unix(0, 0)}}.Run(context.Background())
	if !errors.Is(err, ErrCheck) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Check on a monitor that does not answer = got error %v, want ErrCheck wrapping the deadline", err)
	}
}

func TestCheckRefusesBadSettings(t *testing.T) {
	for _, c := range []Check{
		{For: time.Second, Every: time.Millisecond, Timeout: time.Second},
		{URL: "http://x", For: -1, Every: time.Millisecond, Timeout: time.Second},
		{URL: "http://x", For: time.Second, Timeout: time.Second},
		{URL: "http://x", For: time.Second, Every: time.Millisecond},
	} {
		if err := c.Run(context.Background()); err == nil || errors.Is(err, ErrCheck) {
			t.Errorf("Check%+v.Run = got error %v, want a settings error", c, err)
		}
	}
}
