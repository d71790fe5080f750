package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/sidecar/fakeserver"
	"github.com/repool/repool/internal/sidecar/httpapi"
	"github.com/repool/repool/internal/sidecar/provider"
	"github.com/repool/repool/internal/sidecar/resilience"
	"github.com/repool/repool/internal/sidecar/token"
	"github.com/repool/repool/internal/testenv"
)

// fuzzProvider is the one provider of the fuzzed API.
const fuzzProvider = "p"

// fuzzMaxBody is the fuzzed API's body limit: small, so that inputs reach
// it.
const fuzzMaxBody = 4096

// fakeMethods are the fake's methods whose calls are the sidecar's state as
// the server sees it.
var fakeMethods = []string{"Register", "Deregister", "Acquire", "Renew", "Release", "Report", "SubscribeEvents"}

// recorder keeps the last request of each method the fake received.
type recorder struct {
	mu   sync.Mutex
	last map[string]proto.Message
}

func (r *recorder) record(method string, m proto.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last[method] = proto.Clone(m)
}

func (r *recorder) get(method string) proto.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last[method]
}

// fuzzSidecar is the sidecar's real HTTP API on a loopback server, with one
// provider (breaker, retrier, tokens, gRPC connection) in front of a fake
// server that records what reaches it.
type fuzzSidecar struct {
	fake    *fakeserver.Server
	rec     *recorder
	breaker *resilience.Breaker
	srv     *httptest.Server
	client  *http.Client
}

// onlyProvider is the API's provider set: one provider, never removed.
type onlyProvider struct{ p *provider.Provider }

func (o onlyProvider) Lookup(name string) (httpapi.Handle, bool) {
	if name != fuzzProvider {
		return httpapi.Handle{}, false
	}
	return httpapi.Handle{Provider: o.p, Release: func() {}}, true
}

func (o onlyProvider) Names() []string { return []string{fuzzProvider} }

func (o onlyProvider) All() []*provider.Provider { return []*provider.Provider{o.p} }

// newFuzzSidecar starts the fake and the API until tb ends. The fake's
// event stream sends one event, seq AfterSeq+1, and then ends with
// ABORTED, so that every stream ends by itself.
func newFuzzSidecar(tb testing.TB) *fuzzSidecar {
	tb.Helper()
	rec := &recorder{last: map[string]proto.Message{}}
	fake := fakeserver.Start(tb, fakeserver.Config{
		Register: func(_ context.Context, req *repoolv1.RegisterRequest) (*repoolv1.RegisterResponse, error) {
			rec.record("Register", req)
			return &repoolv1.RegisterResponse{Registered: int32(len(req.GetResources()))}, nil
		},
		Deregister: func(_ context.Context, req *repoolv1.DeregisterRequest) (*repoolv1.DeregisterResponse, error) {
			rec.record("Deregister", req)
			return &repoolv1.DeregisterResponse{Removed: int32(len(req.GetResourceIds()))}, nil
		},
		Acquire: func(_ context.Context, req *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error) {
			rec.record("Acquire", req)
			return &repoolv1.AcquireResponse{Lease: &repoolv1.Lease{LeaseId: "l1", ResourceId: "r1", Context: req.GetContext(), FencingToken: 1}}, nil
		},
		Renew: func(_ context.Context, req *repoolv1.RenewRequest) (*repoolv1.RenewResponse, error) {
			rec.record("Renew", req)
			return &repoolv1.RenewResponse{Lease: &repoolv1.Lease{LeaseId: req.GetLeaseId(), FencingToken: req.GetFencingToken()}}, nil
		},
		Release: func(_ context.Context, req *repoolv1.ReleaseRequest) (*repoolv1.ReleaseResponse, error) {
			rec.record("Release", req)
			return &repoolv1.ReleaseResponse{}, nil
		},
		Report: func(_ context.Context, req *repoolv1.ReportRequest) (*repoolv1.ReportResponse, error) {
			rec.record("Report", req)
			return &repoolv1.ReportResponse{}, nil
		},
		SubscribeEvents: func(req *repoolv1.SubscribeEventsRequest, stream grpc.ServerStreamingServer[repoolv1.Event]) error {
			rec.record("SubscribeEvents", req)
			if err := stream.Send(&repoolv1.Event{Seq: req.GetAfterSeq() + 1, Kind: repoolv1.EventKind_EVENT_KIND_BLOCKED, ResourceId: "r1"}); err != nil {
				return err
			}
			return status.Error(codes.Aborted, "the fake's stream ends")
		},
	})
	conn, err := grpc.NewClient(fake.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatalf("grpc.NewClient(%s) = %v", fake.Addr(), err)
	}
	tb.Cleanup(func() { conn.Close() })
	reg := prometheus.NewRegistry()
	tokens, err := token.New(token.Config{Provider: fuzzProvider, APIKey: fakeserver.DefaultAPIKey,
		Issuer: repoolv1.NewAuthServiceClient(conn), Metrics: token.NewMetrics(reg)})
	if err != nil {
		tb.Fatalf("token.New() = %v", err)
	}
	tb.Cleanup(func() { tokens.Close() })
	resMetrics := resilience.NewMetrics(reg)
	// A window that outlasts the run: the counts change only with calls.
	breaker := resilience.NewBreaker(resilience.BreakerConfig{Provider: fuzzProvider, Metrics: resMetrics,
		Policy: resilience.BreakerPolicy{MinRequests: math.MaxUint32, Window: 10000 * time.Hour, Buckets: 1}})
	p, err := provider.New(provider.Config{
		Name: fuzzProvider, Timeout: testenv.FuzzBound, Pool: repoolv1.NewPoolServiceClient(conn), Tokens: tokens,
		Breaker: breaker, Metrics: provider.NewMetrics(reg),
		Bulkhead: resilience.NewBulkhead(resilience.BulkheadConfig{Provider: fuzzProvider, Metrics: resMetrics}),
		Retrier: resilience.NewRetrier(resilience.RetrierConfig{Provider: fuzzProvider,
			Budget: resilience.NewBudget(resilience.BudgetPolicy{}, nil), Metrics: resMetrics}),
	})
	if err != nil {
		tb.Fatalf("provider.New() = %v", err)
	}
	api, err := httpapi.New(httpapi.Config{Providers: onlyProvider{p}, MaxBodyBytes: fuzzMaxBody, Keepalive: time.Hour,
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})})
	if err != nil {
		tb.Fatalf("httpapi.New() = %v", err)
	}
	srv := httptest.NewServer(api)
	tb.Cleanup(srv.Close)
	return &fuzzSidecar{fake: fake, rec: rec, breaker: breaker, srv: srv, client: srv.Client()}
}

// state is what a request may change: the calls that reached the fake and
// the breaker's counts.
type state struct {
	calls  [7]int64 // by fakeMethods
	counts resilience.Counts
}

func (s *fuzzSidecar) state() state {
	var st state
	for i, m := range fakeMethods {
		st.calls[i] = s.fake.Calls(m)
	}
	st.counts = s.breaker.Status().Counts
	return st
}

// answer is an HTTP answer of the API.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// errorCode returns error.code of a JSON error answer, or "".
func (a answer) errorCode() string {
	var b struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(a.body, &b) != nil || b.Error.Message == "" {
		return ""
	}
	return b.Error.Code
}

// do sends a request as a backend on the same host does (Host
// 127.0.0.1:port, Content-Type application/json) and reads the whole
// answer. ok is false if the client refused to send it.
func (s *fuzzSidecar) do(t *testing.T, method, target string, header http.Header, body []byte) (a answer, ok bool) {
	t.Helper()
	req, err := http.NewRequest(method, s.srv.URL+target, bytes.NewReader(body))
	if err != nil {
		return answer{}, false
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	testenv.Timed(t, method+" "+target, func() {
		resp, err := s.client.Do(req)
		if err != nil {
			ok = false
			return
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s %s: reading the answer: %v", method, target, err)
		}
		a, ok = answer{resp.StatusCode, resp.Header, raw}, true
	})
	return a, ok
}

// fuzzRoute is a route of FuzzRequests: {p} is the provider, {x} the path
// parameter. method is the gRPC method it calls and msg a new request
// message of it ("" and nil: it calls none).
type fuzzRoute struct {
	verb, path string
	method     string
	msg        func() proto.Message
}

var fuzzRoutes = []fuzzRoute{
	{"POST", "/v1/providers/{p}/resources", "Register", func() proto.Message { return &repoolv1.RegisterRequest{} }},
	{"DELETE", "/v1/providers/{p}/resources/{x}", "Deregister", nil},
	{"POST", "/v1/providers/{p}/acquire", "Acquire", func() proto.Message { return &repoolv1.AcquireRequest{} }},
	{"POST", "/v1/providers/{p}/leases/{x}/renew", "Renew", func() proto.Message { return &repoolv1.RenewRequest{} }},
	{"POST", "/v1/providers/{p}/leases/{x}/release", "Release", func() proto.Message { return &repoolv1.ReleaseRequest{} }},
	{"POST", "/v1/providers/{p}/reports", "Report", func() proto.Message { return &repoolv1.ReportRequest{} }},
	{"GET", "/v1/breakers", "", nil},
	{"GET", "/healthz", "", nil},
	{"GET", "/v1/providers/{p}/acquire", "", nil},            // 405
	{"PUT", "/v1/providers/{p}/resources/{x}", "", nil},      // 405
	{"POST", "/v1/providers/{p}/leases/{x}/extend", "", nil}, // 404
}

// want is what the oracle expects of a request: the status and error code,
// and for a forwarded call the request the fake must receive.
type want struct {
	status int
	code   string
	sent   proto.Message
}

// quotedInt32 reports whether the JSON body gives a 32-bit integer field
// of md (at any depth) as a string — protojson accepts "30", the API's
// documentation does not (only 64-bit integers may be strings) — or a
// resource's capacity as 0.
func quotedInt32(body []byte, md protoreflect.MessageDescriptor) bool {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return false
	}
	var walk func(v any, md protoreflect.MessageDescriptor) bool
	walk = func(v any, md protoreflect.MessageDescriptor) bool {
		obj, ok := v.(map[string]any)
		if !ok {
			return false
		}
		for k, x := range obj {
			fd := md.Fields().ByJSONName(k)
			if fd == nil {
				fd = md.Fields().ByName(protoreflect.Name(k))
			}
			if fd == nil {
				continue
			}
			items := []any{x}
			if arr, ok := x.([]any); ok && fd.IsList() {
				items = arr
			}
			for _, it := range items {
				switch fd.Kind() {
				case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
					if _, isStr := it.(string); isStr {
						return true
					}
					// A resource's capacity written as 0 is refused
					// (docs/sidecar.md: leave it out for 1).
					if n, isNum := it.(float64); isNum && n == 0 && fd.FullName() == "repool.v1.Resource.capacity" {
						return true
					}
				case protoreflect.MessageKind:
					if !fd.IsMap() && walk(it, fd.Message()) {
						return true
					}
				}
			}
		}
		return false
	}
	return walk(v, md)
}

// expect is the oracle of FuzzRequests, written from the API's
// documentation rather than its code.
func expect(rt fuzzRoute, prov, param string, body []byte) want {
	switch {
	case rt.method == "" && strings.HasSuffix(rt.path, "/extend"):
		return want{status: 404, code: "not_found"}
	case rt.method == "" && strings.Contains(rt.path, "{p}"):
		return want{status: 405, code: "method_not_allowed"}
	case rt.method == "":
		return want{status: 200}
	case prov != fuzzProvider:
		return want{status: 404, code: "unknown_provider"}
	}
	if rt.method == "Deregister" {
		if !utf8.ValidString(param) {
			return want{status: 400, code: "invalid_argument"}
		}
		return want{status: 200, sent: &repoolv1.DeregisterRequest{ResourceIds: []string{param}}}
	}
	msg := rt.msg()
	switch {
	case len(body) > fuzzMaxBody:
		return want{status: 413, code: "body_too_large"}
	case len(bytes.TrimSpace(body)) == 0, protojson.Unmarshal(body, msg) != nil, quotedInt32(body, msg.ProtoReflect().Descriptor()):
		return want{status: 400, code: "invalid_argument"}
	}
	if l, ok := msg.(interface{ GetLeaseId() string }); ok && strings.Contains(rt.path, "{x}") {
		switch id := l.GetLeaseId(); {
		case !utf8.ValidString(param), id != "" && id != param:
			return want{status: 400, code: "invalid_argument"}
		}
		switch m := msg.(type) {
		case *repoolv1.RenewRequest:
			m.LeaseId = param
		case *repoolv1.ReleaseRequest:
			m.LeaseId = param
		}
	}
	return want{status: 200, sent: msg}
}

// FuzzRequests sends arbitrary bodies and path parameters (a resource or
// lease id, and the provider's name) to every route of the sidecar's real
// HTTP API, in front of a fake server.
//
// Properties: every answer is the one the API's documentation gives (the
// oracle expect): a body larger than the limit is 413, an empty one, one
// that is not the call's JSON, or a lease id that differs from the URL's is
// 400 invalid_argument, an unknown provider 404 unknown_provider; such a
// refusal reaches no server and changes no breaker count. An accepted call
// reaches the fake exactly once, as exactly the request the body and path
// say, and answers 200 with the call's JSON. Every answer is JSON, no error
// quotes the API key, and no request takes longer than testenv.FuzzBound.
func FuzzRequests(f *testing.F) {
	for i := range fuzzRoutes {
		for _, body := range []string{
			`{"resources":[{"id":"proxy-1","capacity":2},{"id":"proxy-2"}]}`,
			`{"resources":[{"id":"r","labels":{"region":"eu"}}]}`,
			`{"resources":[{"id":"r","capacity":0}]}`, `{"resources":[{"id":"r","capacity":-0}]}`,
			`{"context":"product-list","ttl_seconds":30}`,
			`{"context":"search","ttl_seconds":"30","exclude":["a"]}`,
			`{"fencing_token":"1099511627777","outcome":"SUCCESS"}`,
			`{"lease_id":"lease-1","fencing_token":7,"ttl_seconds":30}`,
			`{"lease_id":"other","fencing_token":"7"}`,
			`{"resource_id":"proxy-1","context":"product-list","outcome":"FAILURE"}`,
			`{"resource_id":"r","context":"c","outcome":3,"lease_id":"1","fencing_token":"1"}`,
			`{}`, ``, ` `, `{"unknown":1}`, `[]`, `null`, `{"context":`, `{"ttl_seconds":1e99}`,
			`{"context":"a"} {"context":"b"}`, `{"context":"\ud800"}`, strings.Repeat(" ", fuzzMaxBody+1),
		} {
			f.Add(uint8(i), fuzzProvider, "lease-1", []byte(body))
		}
		for _, param := range []string{"", ".", "..", "a/b", "a%2Fb", "é", "x y", "lease-1?x=1", "#"} {
			f.Add(uint8(i), fuzzProvider, param, []byte(`{"fencing_token":"1","ttl_seconds":30}`))
		}
		for _, prov := range []string{"", "q", "P", "p ", "..", "p/acquire"} {
			f.Add(uint8(i), prov, "lease-1", []byte(`{"context":"c","ttl_seconds":30}`))
		}
	}
	s := newFuzzSidecar(f)
	f.Fuzz(func(t *testing.T, route uint8, prov, param string, body []byte) {
		rt := fuzzRoutes[int(route)%len(fuzzRoutes)]
		target := strings.NewReplacer("{p}", url.PathEscape(prov), "{x}", url.PathEscape(param)).Replace(rt.path)
		w := expect(rt, prov, param, body)
		// A path with an empty segment, or whose percent-decoded form is
		// not clean ("." or ".." segments, or slashes that make them), may
		// be http.ServeMux's: a redirect to the clean form, or no route.
		decoded := strings.NewReplacer("{p}", prov, "{x}", param).Replace(rt.path)
		unclean := path.Clean(decoded) != decoded
		before := s.state()
		a, ok := s.do(t, rt.verb, target, nil, body)
		if !ok {
			return
		}
		call := rt.verb + " " + target
		after := s.state()
		sent := after.calls != before.calls || after.counts != before.counts
		if unclean && a.status >= 300 {
			w = want{status: a.status} // the mux's refusal: must change nothing
		}
		switch {
		case a.status != w.status:
			t.Fatalf("%s with %q = %d %s, want %d %s", call, body, a.status, a.body, w.status, w.code)
		case w.code != "" && a.errorCode() != w.code:
			t.Fatalf("%s with %q = %d %s, want error code %s", call, body, a.status, a.body, w.code)
		case a.status < 300 && a.status >= 200 && a.header.Get("Content-Type") != "application/json":
			t.Fatalf("%s: Content-Type = %q, want application/json", call, a.header.Get("Content-Type"))
		}
		testenv.NoSecret(t, "answer to "+call, string(a.body), fakeserver.DefaultAPIKey)
		if w.sent == nil {
			if sent {
				t.Fatalf("%s = %d %s, which reached the server or the breaker: calls %v -> %v, counts %+v -> %+v",
					call, a.status, a.body, before.calls, after.calls, before.counts, after.counts)
			}
			return
		}
		i := 0
		for i < len(fakeMethods) && fakeMethods[i] != rt.method {
			i++
		}
		before.calls[i]++
		if after.calls != before.calls {
			t.Fatalf("%s: calls that reached the fake = %v, want %v (one %s)", call, after.calls, before.calls, rt.method)
		}
		if got := s.rec.get(rt.method); !proto.Equal(got, w.sent) {
			t.Fatalf("%s with %q: the fake received %v, want %v", call, body, got, w.sent)
		}
	})
}

// kindNames are the event kinds ?kinds= takes, in ASCII capitals; with or
// without EVENT_KIND_, in any letter case.
var kindNames = map[string]repoolv1.EventKind{
	"REGISTERED": repoolv1.EventKind_EVENT_KIND_REGISTERED, "BLOCKED": repoolv1.EventKind_EVENT_KIND_BLOCKED,
	"RECOVERED": repoolv1.EventKind_EVENT_KIND_RECOVERED, "LEASE_EXPIRED": repoolv1.EventKind_EVENT_KIND_LEASE_EXPIRED,
	"REMOVED": repoolv1.EventKind_EVENT_KIND_REMOVED,
}

// asciiUpper upper-cases ASCII letters only.
func asciiUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// parseSeq is the oracle of a resume point: one or more ASCII digits, at
// most 2^64-1.
func parseSeq(s string) (uint64, bool) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	digits := strings.TrimLeft(s, "0")
	const max = "18446744073709551615"
	if len(digits) > len(max) || (len(digits) == len(max) && digits > max) {
		return 0, false
	}
	n, _ := strconv.ParseUint(s, 10, 64)
	return n, true
}

// FuzzLastEventID opens the event stream with arbitrary Last-Event-ID
// headers, ?after_seq= values and ?kinds= lists (through the real HTTP
// API, in front of a fake whose stream sends one event, seq after+1, then
// ends).
//
// Properties: the resume point is Last-Event-ID, or after_seq when the
// header is empty, and it is accepted exactly when it is a decimal
// uint64; kinds are accepted exactly when each non-empty entry names a
// kind (ASCII letters in any case, with or without EVENT_KIND_). An
// accepted stream reaches the fake as exactly that subscription and
// streams its event with id after+1; a refused one is a 400
// invalid_argument naming the bad parameter and reaches no server. No
// stream takes longer than testenv.FuzzBound.
func FuzzLastEventID(f *testing.F) {
	for _, c := range []struct{ id, after, kinds string }{
		{"", "", ""}, {"41", "", ""}, {"", "41", ""}, {"41", "7", "blocked,recovered"}, {"0", "", "BLOCKED"},
		{"18446744073709551615", "", ""}, {"18446744073709551616", "", ""}, {"-1", "", ""}, {"+1", "", ""},
		{" 42 ", "", ""}, {"4 2", "", ""}, {"0x10", "", ""}, {"1e3", "", ""}, {"00000000000000000000042", "", ""},
		{"", "abc", ""}, {"", "", "blocked, ,lease_expired"}, {"", "", "EVENT_KIND_REMOVED,registered"},
		{"", "", "melted"}, {"", "", "unspecified"}, {"", "", "EVENT_KIND_UNSPECIFIED"}, {"", "", ",,"},
		{"", "", "Blocked"}, {"\xff", "", ""}, {"", "\xff", ""},
	} {
		f.Add(c.id, c.after, c.kinds)
	}
	s := newFuzzSidecar(f)
	f.Fuzz(func(t *testing.T, lastEventID, afterSeq, kinds string) {
		q := url.Values{}
		if afterSeq != "" {
			q.Set("after_seq", afterSeq)
		}
		if kinds != "" {
			q.Set("kinds", kinds)
		}
		target := "/v1/providers/" + fuzzProvider + "/events"
		if len(q) > 0 {
			target += "?" + q.Encode()
		}
		header := http.Header{}
		if lastEventID != "" {
			header.Set("Last-Event-ID", lastEventID)
		}
		before := s.state()
		a, ok := s.do(t, "GET", target, header, nil)
		if !ok {
			return // the client would not send it
		}
		call := "GET " + target + " Last-Event-ID " + strconv.Quote(lastEventID)
		after := s.state()

		// The oracle. The server trims the header's surrounding white
		// space, as HTTP says.
		var bad string
		var wantKinds []repoolv1.EventKind
		for _, k := range strings.Split(kinds, ",") {
			if k = strings.TrimSpace(k); k == "" {
				continue
			}
			kind, ok := kindNames[strings.TrimPrefix(asciiUpper(k), "EVENT_KIND_")]
			if !ok || !utf8.ValidString(k) || strings.Trim(k, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_") != "" {
				bad = "kinds"
				break
			}
			wantKinds = append(wantKinds, kind)
		}
		resume, field := textproto.TrimString(lastEventID), "Last-Event-ID"
		if resume == "" {
			resume, field = afterSeq, "after_seq"
		}
		seq, valid := uint64(0), true
		if resume != "" {
			seq, valid = parseSeq(resume)
		}
		if bad == "" && !valid {
			bad = field
		}

		if bad != "" {
			if a.status != 400 || a.errorCode() != "invalid_argument" || !strings.Contains(string(a.body), bad) {
				t.Fatalf("%s = %d %s, want 400 invalid_argument naming %s", call, a.status, a.body, bad)
			}
			if after != before {
				t.Fatalf("%s was refused but reached the server: calls %v -> %v", call, before.calls, after.calls)
			}
			return
		}
		if a.status != 200 || a.header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("%s = %d %s (%s), want a 200 event stream", call, a.status, a.body, a.header.Get("Content-Type"))
		}
		wantReq := &repoolv1.SubscribeEventsRequest{AfterSeq: seq, Kinds: wantKinds}
		if got := s.rec.get("SubscribeEvents"); !proto.Equal(got, wantReq) {
			t.Fatalf("%s: the fake received %v, want %v", call, got, wantReq)
		}
		if id := "\nid: " + strconv.FormatUint(seq+1, 10) + "\nevent: blocked\n"; !strings.Contains(string(a.body), id) {
			t.Fatalf("%s streamed %q, want the event with %q", call, a.body, id)
		}
	})
}
