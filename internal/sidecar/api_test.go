package sidecar_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/config"
	"github.com/repool/repool/internal/sidecar/fakeserver"
)

func TestRefusedRequestsNeverReachUpstream(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{})
	cfg := one("p", fast(fake))
	cfg.MaxBodyBytes = 4096
	h := start(t, cfg, sidecar.Options{})
	big := `{"context":"` + strings.Repeat("x", 5000) + `","ttl_seconds":30}`
	tests := []struct {
		name, method, path, body string
		wantStatus               int
		wantCode                 string
	}{
		{"malformed JSON", "POST", "/v1/providers/p/acquire", `{"context":`, 400, "invalid_argument"},
		{"not an object", "POST", "/v1/providers/p/acquire", `[1,2]`, 400, "invalid_argument"},
		{"unknown field", "POST", "/v1/providers/p/acquire", `{"context":"a","ttl_seconds":1,"tenant":"x"}`, 400, "invalid_argument"},
		{"wrong type", "POST", "/v1/providers/p/acquire", `{"context":"a","ttl_seconds":"soon"}`, 400, "invalid_argument"},
		{"empty body", "POST", "/v1/providers/p/acquire", ``, 400, "invalid_argument"},
		{"oversize body", "POST", "/v1/providers/p/acquire", big, 413, "body_too_large"},
		{"unknown provider", "POST", "/v1/providers/nope/acquire", `{"context":"a","ttl_seconds":1}`, 404, "unknown_provider"},
		{"lease id mismatch", "POST", "/v1/providers/p/leases/l1/release", `{"lease_id":"l2","fencing_token":"1"}`, 400, "invalid_argument"},
		{"unknown outcome", "POST", "/v1/providers/p/reports", `{"resource_id":"r","context":"c","outcome":"MAYBE"}`, 400, "invalid_argument"},
		{"bad event kind", "GET", "/v1/providers/p/events?kinds=everything", ``, 400, "invalid_argument"},
		{"bad Last-Event-ID", "GET", "/v1/providers/p/events?after_seq=-1", ``, 400, "invalid_argument"},
		{"wrong method", "GET", "/v1/providers/p/acquire", ``, 405, "method_not_allowed"},
		{"unknown path", "GET", "/v2/anything", ``, 404, "not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.do(tt.method, tt.path, tt.body)
			if r.status != tt.wantStatus || r.errCode() != tt.wantCode {
				t.Fatalf("%s %s = %d %s, want %d %q", tt.method, tt.path, r.status, r.raw, tt.wantStatus, tt.wantCode)
			}
		})
	}
	for _, m := range []string{"IssueToken", "Acquire", "Release", "Report", "SubscribeEvents"} {
		if got := fake.Calls(m); got != 0 {
			t.Errorf("%s calls upstream = got %d, want 0", m, got)
		}
	}
}

func TestJSONMirrorsTheMessages(t *testing.T) {
	var gotRelease *repoolv1.ReleaseRequest
	var gotReport *repoolv1.ReportRequest
	fake := fakeserver.Start(t, fakeserver.Config{
		Acquire: func(_ context.Context, req *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error) {
			if req.GetContext() != "product-list" || req.GetTtlSeconds() != 30 || req.GetLabels()["region"] != "eu" {
				return nil, status.Errorf(codes.InvalidArgument, "got %v", req)
			}
			return &repoolv1.AcquireResponse{Lease: &repoolv1.Lease{LeaseId: "l-1", ResourceId: "proxy-1", Context: "product-list",
				FencingToken: 1<<62 + 1, ExpiresAt: timestamppb.New(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))}}, nil
		},
		Release: func(_ context.Context, req *repoolv1.ReleaseRequest) (*repoolv1.ReleaseResponse, error) {
			gotRelease = req
			return &repoolv1.ReleaseResponse{}, nil
		},
		Report: func(_ context.Context, req *repoolv1.ReportRequest) (*repoolv1.ReportResponse, error) {
			gotReport = req
			return &repoolv1.ReportResponse{}, nil
		},
	})
	h := start(t, one("p", fast(fake)), sidecar.Options{})
	r := h.do("POST", "/v1/providers/p/acquire", `{"context":"product-list","ttl_seconds":30,"labels":{"region":"eu"}}`)
	lease, _ := r.body["lease"].(map[string]any)
	if r.status != 200 || lease["lease_id"] != "l-1" || lease["resource_id"] != "proxy-1" || lease["context"] != "product-list" ||
		lease["fencing_token"] != "4611686018427387905" || lease["expires_at"] != "2030-01-02T03:04:05Z" {
		t.Fatalf("acquire = %d %s, want the lease in snake case with the fencing token as a string", r.status, r.raw)
	}
	// Fencing tokens are accepted as strings and as numbers.
	for _, ft := range []string{`"4611686018427387905"`, `4611686018427387905`} {
		r = h.do("POST", "/v1/providers/p/leases/l-1/release", `{"fencing_token":`+ft+`,"outcome":"SUCCESS"}`)
		if r.status != 200 || r.raw != "{}\n" || gotRelease.GetLeaseId() != "l-1" || gotRelease.GetFencingToken() != 1<<62+1 || gotRelease.GetOutcome() != repoolv1.Outcome_SUCCESS {
			t.Fatalf("release with fencing_token %s = %d %q, upstream got %v", ft, r.status, r.raw, gotRelease)
		}
	}
	r = h.do("POST", "/v1/providers/p/reports", `{"resource_id":"proxy-1","context":"product-list","outcome":"BLOCKED","lease_id":"l-1","fencing_token":"7"}`)
	if r.status != 200 || gotReport.GetOutcome() != repoolv1.Outcome_BLOCKED || gotReport.GetFencingToken() != 7 {
		t.Fatalf("report = %d %s, upstream got %v", r.status, r.raw, gotReport)
	}
	r = h.do("DELETE", "/v1/providers/p/resources/proxy-1", "")
	if r.status != 200 || r.body["removed"] != 1.0 {
		t.Fatalf("deregister = %d %s, want {\"removed\":1}", r.status, r.raw)
	}
	r = h.do("POST", "/v1/providers/p/resources", `{"resources":[{"id":"a","capacity":2,"labels":{"k":"v"}},{"id":"b"}]}`)
	if r.status != 200 || r.body["registered"] != 2.0 || r.body["existing"] != 0.0 {
		t.Fatalf("register = %d %s, want {\"registered\":2,\"existing\":0}", r.status, r.raw)
	}
	if r := h.do("GET", "/healthz", ""); r.status != 200 || r.body["status"] != "ok" {
		t.Fatalf("GET /healthz = %d %s", r.status, r.raw)
	}
	if r := h.do("GET", "/metrics", ""); r.status != 200 || !strings.Contains(r.raw, `repool_sidecar_calls_total{code="OK",method="Acquire",provider="p"} 1`) {
		t.Fatalf("GET /metrics = %d, want repool_sidecar_calls_total for the acquire:\n%s", r.status, r.raw)
	}
}

// sseEvent is one server-sent event.
type sseEvent struct{ id, event, data string }

// readEvents reads n events (comments skipped) from an SSE body, failing
// the test if they have not all come within 10 s. The caller closes the
// body, which ends the reader.
func readEvents(t *testing.T, sc *bufio.Scanner, n int) []sseEvent {
	t.Helper()
	type result struct {
		evs []sseEvent
		err error
	}
	done := make(chan result, 1)
	go func() {
		var out []sseEvent
		var cur sseEvent
		for len(out) < n && sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if cur != (sseEvent{}) {
					out = append(out, cur)
				}
				cur = sseEvent{}
			case strings.HasPrefix(line, ":"):
			case strings.HasPrefix(line, "id: "):
				cur.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				cur.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				cur.data = line[6:]
			}
		}
		done <- result{out, sc.Err()}
	}()
	select {
	case r := <-done:
		if len(r.evs) < n {
			t.Fatalf("read %d events, want %d (%v)", len(r.evs), n, r.err)
		}
		return r.evs
	case <-time.After(10 * time.Second):
		t.Fatalf("no %d events within 10s", n)
		return nil
	}
}

func TestEventStream(t *testing.T) {
	subscribed := make(chan *repoolv1.SubscribeEventsRequest, 1)
	fake := fakeserver.Start(t, fakeserver.Config{
		SubscribeEvents: func(req *repoolv1.SubscribeEventsRequest, stream grpc.ServerStreamingServer[repoolv1.Event]) error {
			subscribed <- req
			// The server cannot resume after seq 4: a gap marker, then live.
			stream.Send(&repoolv1.Event{Kind: repoolv1.EventKind_EVENT_KIND_UNSPECIFIED, Detail: "gap"})
			stream.Send(&repoolv1.Event{Kind: repoolv1.EventKind_EVENT_KIND_BLOCKED, ResourceId: "proxy-1", Context: "search", Seq: 9})
			stream.Send(&repoolv1.Event{Kind: repoolv1.EventKind_EVENT_KIND_LEASE_EXPIRED, ResourceId: "proxy-2", Seq: 10})
			return status.Error(codes.Unavailable, "server going standby")
		},
	})
	h := start(t, one("p", fast(fake)), sidecar.Options{})
	req, _ := http.NewRequest("GET", h.base+"/v1/providers/p/events?kinds=blocked,lease_expired", nil)
	req.Header.Set("Last-Event-ID", "4")
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatalf("GET events = %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET events = %d %q, want 200 text/event-stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	got := <-subscribed
	if got.GetAfterSeq() != 4 || len(got.GetKinds()) != 2 || got.GetKinds()[0] != repoolv1.EventKind_EVENT_KIND_BLOCKED {
		t.Fatalf("SubscribeEvents request = %v, want after_seq 4 and kinds [BLOCKED LEASE_EXPIRED]", got)
	}
	evs := readEvents(t, bufio.NewScanner(resp.Body), 4)
	want := []struct{ id, event, contains string }{
		{"", "gap", `"gap"`},
		{"9", "blocked", `"resource_id":`},
		{"10", "lease_expired", `"proxy-2"`},
		{"", "error", `"code":"unavailable"`},
	}
	for i, w := range want {
		if evs[i].id != w.id || evs[i].event != w.event || !strings.Contains(evs[i].data, w.contains) {
			t.Fatalf("event %d = %+v, want id %q, event %q, data containing %s", i, evs[i], w.id, w.event, w.contains)
		}
	}
}

func TestEventStreamRefusedByAnOpenBreaker(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{
		Acquire: func(context.Context, *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error) {
			return nil, status.Error(codes.Internal, "broken")
		},
	})
	h := start(t, config.Config{Providers: map[string]config.Provider{"p": fast(fake)}}, sidecar.Options{})
	for range 20 {
		h.acquire("p")
	}
	r := h.do("GET", "/v1/providers/p/events", "")
	if r.status != 503 || r.errCode() != "circuit_open" || fake.Calls("SubscribeEvents") != 0 {
		t.Fatalf("GET events with the breaker open = %d %s (%d upstream), want 503 circuit_open without calling", r.status, r.raw, fake.Calls("SubscribeEvents"))
	}
}

// TestEventStreamRefusedBeforeSubscribing: a server that refuses the
// stream before it subscribes (a standby, say) is answered as a refusal,
// with its status and reason, not as a 200 stream that ends at once; a
// refused token is replaced once, as for any call.
func TestEventStreamRefusedBeforeSubscribing(t *testing.T) {
	standby := fakeserver.Start(t, fakeserver.Config{
		SubscribeEvents: func(*repoolv1.SubscribeEventsRequest, grpc.ServerStreamingServer[repoolv1.Event]) error {
			return status.Error(codes.Unavailable, "not the active server")
		},
	})
	h := start(t, one("p", fast(standby)), sidecar.Options{})
	r := h.do("GET", "/v1/providers/p/events", "")
	if r.status != 503 || r.errCode() != "unavailable" || r.header.Get("X-Repool-Fast-Fail") != "upstream" {
		t.Fatalf("GET events on a standby = %d %s (fast-fail %q), want 503 unavailable, upstream", r.status, r.raw, r.header.Get("X-Repool-Fast-Fail"))
	}

	// A token revoked since it was issued: refused before the stream
	// starts, replaced once.
	fake := fakeserver.Start(t, fakeserver.Config{})
	h2 := start(t, one("p", fast(fake)), sidecar.Options{})
	if r := h2.acquire("p"); r.status != 200 {
		t.Fatalf("acquire = %d %s", r.status, r.raw)
	}
	fake.RevokeAll()
	req, _ := http.NewRequest("GET", h2.base+"/v1/providers/p/events", nil)
	resp, err := h2.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || fake.Calls("IssueToken") != 2 {
		t.Fatalf("GET events with a revoked token = %d with %d tokens issued, want 200 after a second token", resp.StatusCode, fake.Calls("IssueToken"))
	}
}
